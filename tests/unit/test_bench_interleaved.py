"""bench.interleaved's pure parts: the alternation (ABBA, so neither side always follows the other) and the
per-side summary line."""

from __future__ import annotations

from pathlib import Path

from bench.interleaved import Side, order, start_orders


def test_each_side_goes_first_every_other_turn() -> None:
    assert [order(i) for i in range(4)] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]


def test_the_summary_line_gives_cpu_per_turn_and_latency_percentiles() -> None:
    side = Side(cpu_seconds=0.9, ttfd=[3.0, 1.0, 2.0], total=[float(t) for t in range(1, 101)])
    line = side.line("B")
    assert line.startswith("B: server CPU per turn 9.000 ms, ttfd p50 2.000 ms")
    assert "turn p50 50.500 / p99 100.000 / max 100.000 ms (100 turns)" in line


def test_the_second_half_starts_the_servers_in_the_other_order() -> None:
    trees = {"A": Path("/a"), "B": Path("/b")}
    assert [list(half) for half in start_orders(trees)] == [["A", "B"], ["B", "A"]]
    assert [dict(half) for half in start_orders(trees)] == [trees, trees]


def test_the_halves_add_up() -> None:
    side = Side(cpu_seconds=1.0, ttfd=[1.0], total=[2.0])
    side.add(Side(cpu_seconds=0.5, ttfd=[3.0], total=[4.0]))
    assert (side.cpu_seconds, side.ttfd, side.total) == (1.5, [1.0, 3.0], [2.0, 4.0])
