"""A benchmark's subprocesses end with it however it dies: a SIGKILLed benchmark (a `timeout`, an OOM kill) runs no
cleanup, and its fake model and service used to keep running and holding their cores (bench/processes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bench.common import REPO

_PARENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bench.processes import ManagedProcess

    work = Path(sys.argv[1])
    child = ManagedProcess(
        name="sleeper",
        argv=[sys.executable, "-c", "import time; time.sleep(120)"],
        env={},
        cwd=work,
        log_path=work / "sleeper.log",
        ready_file=work / "ready.json",
        cpu=0,
    )
    child.start()
    # Written whole then renamed: the test polls for the file and must never read it half written.
    (work / "child.pid.tmp").write_text(str(child.pid))
    (work / "child.pid.tmp").rename(work / "child.pid")
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    """Running and not a zombie (an orphan is reaped by init, but a zombie child of this test is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_benchmark_takes_its_subprocesses_with_it(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    try:
        pid_file = tmp_path / "child.pid"
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.02)
        child = int(pid_file.read_text())
        assert _alive(child)
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(timeout=10)
