"""The server's long event-loop steps, by where each began and ended (`python -m bench concurrency --long-steps MS`).

A due timer waits behind the callbacks its loop runs first, and most callbacks are task steps: a coroutine
running from one suspension to the next. With BENCH_LONG_STEPS_MS set, bench/serve_probe.py wraps asyncio's
`Handle._run` (private, so this is off unless asked for) and tallies every callback longer than that many
milliseconds under "FROM -> TO": for a task step, the innermost frame outside asyncio its coroutine chain was
suspended in before the step and after it ("qualname:line"; "end" when the task finished); for another
callback, its repr. Walking a task's coroutine chain before every step costs the loop a few microseconds per step.

SIGUSR1 writes the tally since the previous dump beside the lag samples (`steps_file`): a JSON list of
[label, count, total ms].
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from asyncio import events
from pathlib import Path
from typing import Any

_steps: dict[str, list[float]] = {}  # label -> [count, total ms], this window
_installed = False
_ASYNCIO = os.path.dirname(asyncio.__file__) + os.sep


def steps_file(lag_file: Path) -> Path:
    return lag_file.with_name(lag_file.stem + "-steps.json")


def suspended_at(task: asyncio.Task[Any]) -> str:
    """The innermost frame of `task`'s coroutine chain outside asyncio itself ("qualname:line"): where its next
    step resumes (`asyncio.sleep`'s own frame would name no caller)."""
    awaited: Any = task.get_coro()
    where = "?"
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        frame = frame or getattr(awaited, "gi_frame", None)
        if frame is not None and not frame.f_code.co_filename.startswith(_ASYNCIO):
            where = f"{frame.f_code.co_qualname}:{frame.f_lineno}"
        nxt = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
        awaited = nxt or getattr(awaited, "gi_yieldfrom", None)
    return where


def install(limit_ms: float) -> None:
    """Tallies every callback of this process's loops that runs longer than `limit_ms`."""
    global _installed
    if _installed:
        return
    _installed = True
    run_callback = events.Handle._run
    clock = time.perf_counter
    limit_s = limit_ms / 1000

    def timed_callback(handle: events.Handle) -> None:
        callback = getattr(handle, "_callback", None)  # private, absent from the stubs
        owner = getattr(callback, "__self__", None)
        task = owner if isinstance(owner, asyncio.Task) else None
        before = suspended_at(task) if task is not None else None
        started = clock()
        try:
            run_callback(handle)
        finally:
            spent = clock() - started
            if spent > limit_s:
                if task is None:
                    label = repr(callback)[:100]
                else:
                    label = f"{before} -> {'end' if task.done() else suspended_at(task)}"
                tally = _steps.setdefault(label, [0, 0.0])
                tally[0] += 1
                tally[1] += spent * 1000

    setattr(events.Handle, "_run", timed_callback)  # noqa: B010


def dump(path: Path) -> None:
    """Writes this window's tally to `path` (atomically) and starts a new window; nothing when not installed."""
    if not _installed:
        return
    data = [[label, int(count), round(total, 3)] for label, (count, total) in _steps.items()]
    _steps.clear()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def top(tallies: dict[str, list[float]], limit_ms: float, count: int = 6) -> str:
    """The `count` labels with the most time, one per line: "n × mean ms  FROM -> TO"."""
    ranked = sorted(tallies.items(), key=lambda item: -item[1][1])[:count]
    lines = [f"{int(n)} × {total / n:.2f} ms  {label}" for label, (n, total) in ranked]
    return f"(steps over {limit_ms:g} ms, by total time)" + "".join(f"\n    {line}" for line in lines)
