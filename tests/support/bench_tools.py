"""Running a `python -m bench.<tool>` from a test, as a person would from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.common import REPO


def run_bench_tool(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m bench.<module> ARGS` at the repository root with the worktree on its path; raises on failure."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(REPO / p) for p in ("", "server/src", "clients/python/src")))
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
