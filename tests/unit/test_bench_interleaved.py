"""bench.interleaved's pure parts: the alternation (ABBA, so neither side always follows the other), the per-side
summary line, and the frozen heap of the measuring process."""

from __future__ import annotations

import gc
from pathlib import Path

from bench.common import heap_frozen
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


def test_while_measuring_the_clients_heap_is_out_of_the_collectors_sight() -> None:
    # The imports alone are over 170,000 objects; a full collection of them took 80-125 ms inside one measured
    # turn of about every 870 (bench/common.py heap_frozen, used by bench.interleaved, bench.timeline and every
    # MeasuredWindow).
    before = gc.get_freeze_count()
    with heap_frozen() as frozen:
        assert frozen > 50_000
        assert gc.get_freeze_count() > 50_000
    assert gc.get_freeze_count() == before
