"""`python -m bench.timeline` (bench/timeline.py, bench/timeline_marks.py): a turn's marks, server and client on one
clock, in order; a mark whose function is gone stops the tool with its name rather than leaving a hole."""

from __future__ import annotations

import pytest

from bench.common import REPO
from bench.processes import BenchError
from bench.timeline import table
from bench.timeline_marks import POINTS, install
from tests.support.bench_tools import run_bench_tool


def _timeline(*args: str) -> dict[str, tuple[float, int]]:
    done = run_bench_tool("timeline", *args)
    rows: dict[str, tuple[float, int]] = {}
    for line in done.stdout.splitlines()[1:]:
        median, key, seen = line.split()
        rows[key] = (float(median), int(seen.strip("()")))
    return rows


def test_a_text_turn_is_marked_from_the_call_to_run_finished() -> None:
    rows = _timeline("--turns", "4", "--warmup", "1", "--idle-ms", "0")
    order = ["client.send#1", "rpc>#1", "admission.commit>#1", "apply#1", "driver>#1", "sdk.post>#1"]
    order += ["http.body>#1", "model.stream:TextDelta#1", "client.assistant_delta#1", "client.run_finished#1"]
    assert all(rows[key][1] == 4 for key in order), {key: rows.get(key) for key in order}
    assert [rows[key][0] for key in order] == sorted(rows[key][0] for key in order)
    assert rows["rpc>#1"][0] == 0.0


def test_a_tool_round_is_marked_too() -> None:
    rows = _timeline("--turns", "2", "--warmup", "1", "--prompt", "list the text files @bench-glob")
    assert rows["round>#1"][1] == rows["tool>#1"][1] == 2
    assert rows["round>#1"][0] < rows["tool>#1"][0] < rows["tool<#1"][0] < rows["sdk.post>#2"][0]


def test_a_point_that_is_gone_stops_the_marks_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.timeline_marks.POINTS", (*POINTS, ("bench.timeline", "no_such_function", "x")))
    with pytest.raises(SystemExit, match=r"bench\.timeline\.no_such_function is gone"):
        install(REPO / "unused.json")


def test_the_turns_of_the_server_and_of_the_client_must_match() -> None:
    with pytest.raises(BenchError, match="1 server turns marked for 2 client turns"):
        table([("rpc>", 1)], [[("client.send", 0)], [("client.send", 2)]])
