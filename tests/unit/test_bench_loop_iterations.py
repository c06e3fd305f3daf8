"""bench/serve_probe.py's loop-iteration clock (`python -m bench concurrency --loop-iterations`): each loop
iteration that ran callbacks is recorded with their total time, and SIGUSR1's dump writes those times beside
the lag samples. It wraps asyncio itself, so it runs in a child interpreter, not in the test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHILD = """
import asyncio, json, sys, time
from pathlib import Path
from bench import serve_probe

serve_probe._clock_iterations()

def busy(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

async def main():
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    loop.call_soon(busy, 60)  # two callbacks of one iteration: 60 + 40 ms
    loop.call_soon(busy, 40)
    await asyncio.sleep(0.05)
    loop.call_soon(busy, 10)  # alone in its iteration
    await asyncio.sleep(0.05)

asyncio.run(main())
serve_probe._dump(Path(sys.argv[1]))
"""


def test_iterations_are_timed_by_their_callbacks_and_dumped_beside_the_lag_samples(tmp_path: Path) -> None:
    lag_file = tmp_path / "lag.json"
    subprocess.run([sys.executable, "-c", _CHILD, str(lag_file)], check=True, timeout=60)
    spent = json.loads((tmp_path / "lag-iterations.json").read_text())
    assert json.loads(lag_file.read_text()) == []  # no probe ran: no lag samples
    # Both callbacks of the first iteration in one figure (each alone is well under 100 ms), then the lone one.
    assert len([ms for ms in spent if ms >= 100]) == 1, spent
    assert [ms for ms in spent if 10 <= ms < 100], spent
    assert all(ms > 0 for ms in spent)  # iterations that ran nothing are not recorded
