"""bench/loop_steps.py (`python -m bench concurrency --long-steps MS`): every loop callback longer than the limit is
tallied under where its task step began and ended (or the callback's repr), and the dump writes the tally. It wraps
asyncio itself, so it runs in a child interpreter, not in the test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import loop_steps

_CHILD = """
import asyncio, sys, time
from pathlib import Path
from bench import loop_steps

# The limit is wall time: well above what a preempted short step takes on a loaded machine.
loop_steps.install(25)

def busy(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

async def inner():
    await asyncio.sleep(0)  # the first step ends here
    busy(80)  # the second step: from the sleep above to the one below
    await asyncio.sleep(0)
    pass  # too short to count

async def main():
    await inner()
    asyncio.get_running_loop().call_soon(busy, 50)  # a plain callback
    await asyncio.sleep(0.05)

asyncio.run(main())
loop_steps.dump(Path(sys.argv[1]))
"""


def test_long_steps_are_tallied_by_where_they_began_and_ended(tmp_path: Path) -> None:
    out = tmp_path / "lag-steps.json"
    subprocess.run([sys.executable, "-c", _CHILD, str(out)], check=True, timeout=60)
    tally = {label: (count, total) for label, count, total in json.loads(out.read_text())}
    steps = [label for label in tally if "inner" in label]
    assert len(steps) == 1, tally
    began, ended = steps[0].split(" -> ")
    assert began.startswith("inner:"), steps
    assert ended.startswith("inner:"), steps
    assert began != ended
    count, total = tally[steps[0]]
    assert count == 1
    assert 80 <= total < 1000
    plain = [label for label in tally if "busy" in label]
    assert len(plain) == 1, tally
    assert tally[plain[0]][0] == 1
    assert all(total > 25 for _, total in tally.values())  # nothing under the limit


def test_steps_file_sits_beside_the_lag_file() -> None:
    assert loop_steps.steps_file(Path("/w/lag.json")) == Path("/w/lag-steps.json")


def test_top_ranks_by_total_time() -> None:
    text = loop_steps.top({"a -> b": [10, 5.0], "c -> d": [1, 9.0]}, 0.3)
    assert text.splitlines() == [
        "(steps over 0.3 ms, by total time)",
        "    1 × 9.00 ms  c -> d",
        "    10 × 0.50 ms  a -> b",
    ]
