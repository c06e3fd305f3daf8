"""Capacity of one server process:

- `concurrency`: closed-loop text turns from 50 and from 200 concurrent sessions (one asyncio task per
  session in this process) for a fixed time, against the bare SDK with the same number of concurrent
  conversations (each growing its history as the service grows its session's); service and baseline
  phases alternate. Turns/s, errors, and the server's event-loop lag p99 during the 200-session phases
  (bench.serve_probe's 10 ms sleep probe) against the same probe on the bare SDK's loop (this process) during
  its phases: at saturation a loop's lag is the work queued on it, and the baseline shows how much of that any
  client of one core pays. With `--loop-iterations` the report adds how long the server's loop iterations spend
  in callbacks during those phases (bench.serve_probe), the work a due timer waits behind, and with
  `--long-steps MS` the callbacks longer than MS by where their task steps began and ended (bench/loop_steps.py).
- `memory`: RSS growth of the server per idle loaded session (1,000 sessions, one turn each, all kept in
  the idle cache) and per open WatchSession stream (1,000 streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench import loop_steps
from bench.common import BenchContext, MeasuredWindow, Result, environment, loadavg, percentile, temp_workdir
from bench.harness import (
    BaselineClient,
    Conversation,
    ServiceClient,
    fake_last,
    row,
    start_bench_service,
    start_fast_fake,
)
from bench.processes import ManagedProcess, process_rss_kb
from bench.serve_probe import iterations_file, probe
from general_agent.v1 import turn_pb2

LEVELS: Final = (50, 200)


async def closed_loop(count: int, seconds: float, turn: Callable[[int], Awaitable[None]]) -> tuple[float, int]:
    """`count` tasks each running turns back to back for `seconds`: (completed turns/s, errors)."""
    done = errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        nonlocal done, errors
        while time.perf_counter() < deadline:
            try:
                await turn(i)
            except Exception:
                errors += 1
                await asyncio.sleep(0.01)
            else:
                if time.perf_counter() <= deadline:
                    done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(count)))
    return done / min(seconds, time.perf_counter() - t0), errors


def _lag(
    pid: int, path: Any, iterations: list[float] | None = None, steps: dict[str, list[float]] | None = None
) -> list[float]:
    """The server's lag samples since the previous call (its iteration times and long steps, when recorded, into
    `iterations` and `steps`)."""
    os.kill(pid, signal.SIGUSR1)
    for _ in range(200):
        with contextlib.suppress(OSError, ValueError):
            data: list[float] = json.loads(path.read_text())
            path.unlink()
            with contextlib.suppress(OSError, ValueError):
                # Written before the lag samples, so present once they are, if recorded at all.
                spent = json.loads(iterations_file(path).read_text())
                iterations_file(path).unlink()
                if iterations is not None:
                    iterations.extend(spent)
            _add_steps(loop_steps.steps_file(path), steps)
            return data
        time.sleep(0.01)
    return []


def _add_steps(path: Any, steps: dict[str, list[float]] | None) -> None:
    """Adds the long-step tally in `path` (bench/loop_steps.py), if the server wrote one, to `steps`."""
    with contextlib.suppress(OSError, ValueError):
        tally = json.loads(path.read_text())
        path.unlink()
        for label, count, total in tally:
            if steps is not None:
                seen = steps.setdefault(label, [0, 0.0])
                seen[0] += count
                seen[1] += total


async def _probed_loop(
    count: int, seconds: float, turn: Callable[[int], Awaitable[None]], samples: list[float]
) -> tuple[float, int]:
    """`closed_loop` with bench.serve_probe's probe on this process's loop (the bare SDK's), into `samples`."""
    probing = asyncio.create_task(probe(samples))
    try:
        return await closed_loop(count, seconds, turn)
    finally:
        probing.cancel()


def _lag_row(
    lag: list[float], base_lag: list[float], iterations: list[float], figures: dict[str, Any]
) -> dict[str, Any]:
    """The loop-lag row (sorted samples, ms): the server's p99 against the bare SDK's own loop."""
    if iterations:
        spent = sorted(iterations)
        figures[f"loop iterations under {LEVELS[-1]} sessions: count / callback ms p50 / p90 / p99 / max"] = (
            f"{len(spent)} / {percentile(spent, 50):.2f} / {percentile(spent, 90):.2f} / "
            f"{percentile(spent, 99):.2f} / {spent[-1]:.2f}"
        )
    figures["loop lag samples / max ms"] = f"{len(lag)} / {lag[-1] if lag else float('nan'):.2f}"
    figures["bare SDK loop lag samples / p50 / max ms"] = (
        f"{len(base_lag)} / {percentile(base_lag, 50):.2f} / {base_lag[-1] if base_lag else float('nan'):.2f}"
    )
    title = f"event-loop lag p99 under {LEVELS[-1]} sessions"
    return row(title, percentile(lag, 99), percentile(base_lag, 99), max_value=2.0)


@dataclass
class _Load:
    """One concurrency run: the service and the bare SDK beside it, and what every level adds to the report."""

    service: ManagedProcess
    fake: ManagedProcess
    lag_file: Path
    svc: ServiceClient
    base: BaselineClient
    template: dict[str, Any]
    lag: list[float] = field(default_factory=list)
    iterations: list[float] = field(default_factory=list)  # the server's loop iterations' callback ms
    steps: dict[str, list[float]] = field(default_factory=dict)  # the server's long loop steps (--long-steps)
    base_lag: list[float] = field(default_factory=list)  # the bare SDK's loop (this process), for comparison
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    window: MeasuredWindow | None = None  # the last service phase's


async def _level(load: _Load, count: int, seconds: float, rounds: int) -> dict[str, Any]:
    """`count` sessions against `count` bare conversations, phases alternating: the level's turns/s row."""
    svc, base, figures = load.svc, load.base, load.figures
    sessions = [await svc.create() for _ in range(count)]
    convs = [Conversation(load.template) for _ in range(count)]
    failures: list[str] = []

    async def base_turn(i: int) -> None:
        sample = await base.call(convs[i].request())
        convs[i].record("hi", sample.text)

    async def svc_turn(i: int) -> None:
        try:
            await svc.turn(sessions[i])
        except Exception as exc:  # closed_loop counts it; the first one is kept for the report
            if not failures:
                failures.append(f"{type(exc).__name__}: {exc}"[:300])
            raise

    base_rates: list[float] = []
    svc_rates: list[float] = []
    errors = [0, 0]
    await closed_loop(count, 0.3, svc_turn)  # warm-up
    await closed_loop(count, 0.3, base_turn)
    last = count == LEVELS[-1]
    for _ in range(rounds):
        rate, err = await _probed_loop(count, seconds, base_turn, load.base_lag if last else [])
        base_rates.append(rate)
        errors[0] += err
        _lag(load.service.pid, load.lag_file)
        with MeasuredWindow(load.service, load.fake) as window:
            rate, err = await closed_loop(count, seconds, svc_turn)
        load.window = window
        svc_rates.append(rate)
        errors[1] += err
        if last:
            load.lag += _lag(load.service.pid, load.lag_file, load.iterations, load.steps)
        figures[f"{count} sessions: client CPU % during service phase"] = round(100 * window.self_cpu / window.wall, 1)
        figures[f"{count} sessions: service CPU %"] = round(100 * window.service_cpu / window.wall, 1)
    svc_rate, base_rate = sorted(svc_rates)[len(svc_rates) // 2], sorted(base_rates)[len(base_rates) // 2]
    r = row(f"{count} concurrent sessions, turns/s", svc_rate, base_rate, unit="turns/s", min_ratio=0.6)
    if errors[1]:
        r["pass"] = False
    r["errors (service, baseline)"] = errors[1], errors[0]
    figures[f"{count} sessions: errors service / baseline"] = f"{errors[1]} / {errors[0]}"
    if failures:
        figures[f"{count} sessions: first service error"] = failures[0]
        # In the printed notes too: the next run overwrites the JSON, and a rare error is worth its message.
        load.notes.append(
            f"{count} sessions: {errors[1]} service error(s) measured; the first error, warm-up included: {failures[0]}"
        )
    return r


async def concurrency(ctx: BenchContext) -> Result:
    seconds, rounds = (1.0, 1) if ctx.quick else (4.0, 3)
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-load-")
        lag_file = workdir / "lag.json"
        fake, base_url = await start_fast_fake(stack, workdir, ctx.cpus.fake)
        service, address = await start_bench_service(stack, workdir, ctx.cpus.service, base_url, lag_file=lag_file)
        svc = ServiceClient(address)
        stack.push_async_callback(svc.close)
        base = BaselineClient(base_url)
        stack.push_async_callback(base.close)
        await svc.turn(await svc.create())
        load = _Load(service, fake, lag_file, svc, base, fake_last(base_url))
        rows = [await _level(load, count, seconds, rounds) for count in LEVELS]
        rows.append(_lag_row(sorted(load.lag), sorted(load.base_lag), load.iterations, load.figures))
        if load.steps:
            limit = float(os.environ.get("BENCH_LONG_STEPS_MS", "0"))
            load.figures[f"long loop steps under {LEVELS[-1]} sessions"] = loop_steps.top(load.steps, limit)
    assert load.window is not None  # every level measures at least one round
    return {
        "benchmark": "concurrency",
        "title": "turns/s of one process under concurrent sessions",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": environment(ctx.cpus),
        "configuration": {"phase": f"{seconds}s × {rounds} alternating rounds", "loadavg at end": loadavg()},
        "rows": rows,
        "cpu": load.figures,
        "notes": load.window.notes(ctx.cpus) + load.notes,
    }


async def memory(ctx: BenchContext) -> Result:
    sessions_n = 50 if ctx.quick else 1000
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-memory-")
        _, base_url = await start_fast_fake(stack, workdir, ctx.cpus.fake)
        service, address = await start_bench_service(
            stack, workdir, ctx.cpus.service, base_url, extra_args=("--max-idle-sessions", str(2 * sessions_n + 10))
        )
        svc = ServiceClient(address)
        stack.push_async_callback(svc.close)
        for _ in range(3):
            await svc.turn(await svc.create())
        await asyncio.sleep(0.5)
        rss0 = process_rss_kb(service.pid)
        sessions = []
        for _ in range(sessions_n):
            sessions.append(await svc.create())
            await svc.turn(sessions[-1])
        await asyncio.sleep(0.5)
        rss1 = process_rss_kb(service.pid)
        calls = [
            svc.stub.WatchSession(turn_pb2.WatchSessionRequest(session_id=sid, after_sequence=0)) for sid in sessions
        ]
        # From sequence 0 a watch first replays the session's events: one read means the server holds it.
        await asyncio.wait_for(asyncio.gather(*(call.read() for call in calls)), 60)
        await asyncio.sleep(0.5)
        rss2 = process_rss_kb(service.pid)
        for call in calls:
            call.cancel()
    per_session = (rss1 - rss0) / sessions_n
    per_watch = (rss2 - rss1) / sessions_n
    rows = [
        row(f"RSS per idle loaded session ({sessions_n})", per_session, None, unit="KB", max_value=100.0),
        row(f"RSS per open watch stream ({sessions_n})", per_watch, None, unit="KB", max_value=30.0),
    ]
    return {
        "benchmark": "memory",
        "title": "server RSS per idle loaded session and per open watch stream",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": environment(ctx.cpus),
        "configuration": {"sessions": sessions_n, "each": "one text turn (2 history messages), then idle"},
        "rows": rows,
        "cpu": {
            "RSS before / after sessions / after watches, MB": f"{rss0 / 1024:.1f} / {rss1 / 1024:.1f} / "
            f"{rss2 / 1024:.1f}"
        },
        "notes": [],
    }
