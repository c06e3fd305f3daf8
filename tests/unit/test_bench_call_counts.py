"""bench/call_counts.py and bench/cprofile_toggle.py (`python -m bench.call_counts`): the server's toggle profiles
only between two signals, and the report divides cProfile's counts by the turns profiled. The toggle installs a
signal handler, so it runs in a child interpreter, not in the test's."""

from __future__ import annotations

import cProfile
import subprocess
import sys
from pathlib import Path

from bench.call_counts import callees, per_turn, report
from tests.support.bench_tools import run_bench_tool

_CHILD = """
import os, sys
from pathlib import Path
from bench.cprofile_toggle import TOGGLE, install_toggle

def before_profiling():
    return sum(range(100))

def while_profiling():
    return sum(range(100))

install_toggle(Path(sys.argv[1]))
before_profiling()
os.kill(os.getpid(), TOGGLE)
for _ in range(7):
    while_profiling()
os.kill(os.getpid(), TOGGLE)
before_profiling()
"""


def test_the_toggle_profiles_between_two_signals_only(tmp_path: Path) -> None:
    stats = tmp_path / "server.prof"
    subprocess.run([sys.executable, "-c", _CHILD, str(stats)], check=True, timeout=60)
    rows = {row.name.rsplit(" ", 1)[-1]: row for row in per_turn(stats, turns=7)}
    assert rows["while_profiling"].calls == 1.0
    assert "before_profiling" not in rows


def inner() -> int:
    return sum(range(1000))


def outer() -> int:
    return inner() + inner() + inner()


def test_counts_and_times_are_per_turn_and_the_tree_names_what_a_function_calls(tmp_path: Path) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(4):  # four "turns"
        outer()
    profiler.disable()
    stats = tmp_path / "turns.prof"
    profiler.dump_stats(stats)
    rows = per_turn(stats, turns=4)
    by_function = {row.name.rsplit(" ", 1)[-1]: row for row in rows}
    assert by_function["inner"].calls == 3.0
    assert by_function["outer"].calls == 1.0
    assert by_function["outer"].inclusive_us >= by_function["inner"].inclusive_us  # all three calls of a turn
    assert [r.own_us for r in rows] == sorted((r.own_us for r in rows), reverse=True)
    [(function, kids)] = callees(stats, "outer", turns=4)
    assert function.endswith(" outer")
    assert kids[0].name.endswith(" inner")
    assert kids[0].calls == 3.0
    printed = report(rows, top=2)
    assert "calls/turn" in printed.splitlines()[0]
    assert len(printed.splitlines()) == 4  # the header, two rows, the total


def test_the_tool_counts_a_servers_turns(tmp_path: Path) -> None:
    """End to end: a server profiled over 10 fresh-session turns admits one run per turn and commits each run's
    steps through the store."""
    done = run_bench_tool("call_counts", "--turns", "10", "--top", "100000", "--tree", "_commit_now")
    table, _, tree = done.stdout.partition("\n\ngeneral_agent_server/sessions/ledger.py")
    admissions = [line for line in table.splitlines() if line.endswith(" prepare_admission")]
    assert len(admissions) == 1
    assert float(admissions[0].split()[0]) == 1.0
    assert "store/sqlite/store.py" in tree
    assert tree.count("/turn") >= 2
