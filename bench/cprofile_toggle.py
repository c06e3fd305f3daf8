"""The server side of `python -m bench.call_counts`: with BENCH_CPROFILE_FILE set, bench/serve_probe.py installs
a signal handler that starts cProfile on the loop's thread, and at the next signal stops it and writes its stats.
A module of its own so the server imports nothing of the benchmarks' client side."""

from __future__ import annotations

import cProfile
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

ENV = "BENCH_CPROFILE_FILE"
TOGGLE = signal.SIGWINCH  # unused by the server, and ignored by default when nobody handles it


def install_toggle(path: Path) -> None:
    """In the server (bench/serve_probe.py): each TOGGLE starts cProfile, or stops it and writes its stats to
    `path` (atomically). The handler runs on the main thread, the loop's, which is the one profiled."""
    profiler = cProfile.Profile()
    running = False

    def on_toggle(signum: int, frame: FrameType | None) -> Any:
        nonlocal running
        if not running:
            profiler.enable()
            running = True
            return
        profiler.disable()
        running = False
        tmp = path.with_suffix(".tmp")
        profiler.dump_stats(tmp)
        os.replace(tmp, path)

    signal.signal(TOGGLE, on_toggle)
