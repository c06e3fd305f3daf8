"""bench.interleaved's pure parts: the alternation (ABBA, so neither side always follows the other) and the
per-side summary line."""

from __future__ import annotations

from bench.interleaved import Side, order


def test_each_side_goes_first_every_other_turn() -> None:
    assert [order(i) for i in range(4)] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]


def test_the_summary_line_gives_cpu_per_turn_and_latency_percentiles() -> None:
    side = Side(cpu_seconds=0.9, ttfd=[3.0, 1.0, 2.0], total=[float(t) for t in range(1, 101)])
    line = side.line("B")
    assert line.startswith("B: server CPU per turn 9.000 ms, ttfd p50 2.000 ms")
    assert "turn p50 50.500 / p99 100.000 / max 100.000 ms (100 turns)" in line
