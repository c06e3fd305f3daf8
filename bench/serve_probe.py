"""`python -m bench.serve_probe serve ...`: `general-agent serve ...` with an event-loop lag probe.

With BENCH_LAG_FILE set, a task on the server's loop sleeps 10 ms at a time and records how late each
wake-up was; SIGUSR1 writes the samples recorded since the previous SIGUSR1 to BENCH_LAG_FILE (JSON list
of milliseconds, written atomically) and starts a new window. With BENCH_LOOP_ITERATIONS=1 too (`python -m
bench concurrency --loop-iterations`), the loop also records how long each of its iterations spent running
callbacks, written beside the lag samples (`iterations_file`): what a timer due meanwhile waits behind. It wraps
two private methods of asyncio (Handle._run, BaseEventLoop._run_once), a few percent of the loop's time, so it
is off unless asked for. With BENCH_LONG_STEPS_MS too (`--long-steps MS`), bench/loop_steps.py tallies the
callbacks longer than that by where their task steps began and ended, dumped beside them. With BENCH_TIMELINE_FILE
set,
bench/timeline_marks.py marks the functions a turn passes through (`python -m bench.timeline`). With
BENCH_CPROFILE_FILE set, SIGWINCH starts and stops cProfile on the loop's thread (`python -m bench.call_counts`).
Without any of them this is `general-agent`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from bench import cprofile_toggle, loop_steps
from general_agent_server.cli import main

_INTERVAL = 0.01
_samples: list[float] = []
_iterations: list[float] = []  # ms of callbacks per loop iteration that ran any, this window


def iterations_file(lag_file: Path) -> Path:
    return lag_file.with_name(lag_file.stem + "-iterations.json")


def _clock_iterations() -> None:
    """Wraps asyncio's callback runner and loop iteration (module docstring) to add each iteration's callback
    time to `_iterations`."""
    from asyncio import base_events, events

    spent = [0.0]
    run_callback = events.Handle._run
    run_once: Callable[[base_events.BaseEventLoop], None] = getattr(base_events.BaseEventLoop, "_run_once")  # noqa: B009
    clock = time.perf_counter

    def timed_callback(handle: events.Handle) -> None:
        started = clock()
        try:
            run_callback(handle)
        finally:
            spent[0] += clock() - started

    def timed_iteration(loop: base_events.BaseEventLoop) -> None:
        spent[0] = 0.0
        run_once(loop)
        if spent[0]:
            _iterations.append(spent[0] * 1000)

    setattr(events.Handle, "_run", timed_callback)  # noqa: B010
    setattr(base_events.BaseEventLoop, "_run_once", timed_iteration)  # noqa: B010


async def probe(samples: list[float]) -> None:
    """Sleeps 10 ms at a time on the running loop and records how late each wake-up was (ms), until cancelled;
    the benchmarks run it on the bare SDK's loop too, for comparison."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(_INTERVAL)
        samples.append((time.perf_counter() - t0 - _INTERVAL) * 1000)


def _dump(path: Path) -> None:
    if _iterations:
        _write(iterations_file(path), _iterations)
    loop_steps.dump(loop_steps.steps_file(path))  # before the lag samples, which the reader waits for
    _write(path, _samples)


def _write(path: Path, samples: list[float]) -> None:
    data = list(samples)
    samples.clear()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([round(x, 4) for x in data]))
    os.replace(tmp, path)


class _ProbedPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        tasks: list[asyncio.Task[None]] = []
        loop.call_soon(lambda: tasks.append(loop.create_task(probe(_samples))))
        return loop


def run(argv: list[str]) -> int:
    profile_file = os.environ.get(cprofile_toggle.ENV)
    if profile_file:
        cprofile_toggle.install_toggle(Path(profile_file))
    timeline_file = os.environ.get("BENCH_TIMELINE_FILE")
    if timeline_file:
        from bench.timeline_marks import install

        install(Path(timeline_file))
    lag_file = os.environ.get("BENCH_LAG_FILE")
    if lag_file:
        path = Path(lag_file)

        def on_usr1(signum: int, frame: FrameType | None) -> Any:
            _dump(path)

        signal.signal(signal.SIGUSR1, on_usr1)
        asyncio.set_event_loop_policy(_ProbedPolicy())
        if os.environ.get("BENCH_LOOP_ITERATIONS") == "1":
            _clock_iterations()
        if os.environ.get("BENCH_LONG_STEPS_MS"):
            loop_steps.install(float(os.environ["BENCH_LONG_STEPS_MS"]))
    return main(argv)


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
