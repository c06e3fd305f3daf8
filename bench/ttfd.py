"""B1: time to the first `assistant_delta` over gRPC, against a bare `anthropic` SDK streaming call.

Target: the service's p50 is ≤ 1.5× the baseline's p50, or ≤ baseline p50 + 0.6 ms.

- Fake Anthropic server: its own process on the second core, replying "ok" as one text delta.
- Service: `general-agent serve` on the first core, talking to the fake through its own SDK client.
- Baseline: this process (second core) calling `AsyncAnthropic.messages.create(stream=True)` directly
  against the same fake; timed from the call to the first `text_delta`. One client (keep-alive).
- Service path: timed from issuing `StreamTurn` to the first `assistant_delta` event; each iteration
  uses a fresh session (created untimed) and drains the stream to `run_finished` (untimed).

Iterations alternate baseline, service, baseline, service … so machine noise hits both alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, NamedTuple, TypeVar

import anthropic
import grpc

from bench.common import (
    BenchContext,
    BenchError,
    ManagedProcess,
    Result,
    context_switches,
    environment,
    latency_stats,
    loadavg,
    process_cpu_seconds,
    process_rss_kb,
    service_tool_definitions,
    start_fake,
    start_service,
    stream_turn,
    system_cpu_seconds,
    temp_workdir,
    thread_affinities,
)
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api

NAME: Final = "ttfd"
TITLE: Final = "time to first assistant_delta (service over gRPC vs bare anthropic SDK)"

MODEL_REF: Final = "claude-haiku-4-5"  # no thinking by default: the first block is text
BASELINE_MAX_TOKENS: Final = 64_000  # what the service sends for this model (its catalog maximum)
PROMPT: Final = "hi"
REPLY_TEXT: Final = "ok"  # the fake streams it as exactly one text_delta
ITERATION_TIMEOUT: Final = 10.0

RATIO_TARGET: Final = 1.5
DIFF_TARGET_MS: Final = 0.6


class _Baseline:
    """The bare SDK call, the fastest path: raw `create(stream=True)` events, no helper accumulation."""

    def __init__(self, base_url: str) -> None:
        self.client = anthropic.AsyncAnthropic(base_url=base_url, api_key="dummy", max_retries=0)
        self.tools = service_tool_definitions()

    async def once(self) -> int:
        """Nanoseconds from the call to the first text_delta; the rest of the stream is drained untimed."""
        first_ns = 0
        text: list[str] = []
        t0 = time.perf_counter_ns()
        stream = await self.client.messages.create(
            model=MODEL_REF,
            max_tokens=BASELINE_MAX_TOKENS,
            messages=[{"role": "user", "content": PROMPT}],
            tools=self.tools,
            stream=True,
        )
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                if not first_ns:
                    first_ns = time.perf_counter_ns()
                text.append(event.delta.text)
        if not first_ns:
            raise BenchError("baseline stream ended without a text_delta")
        if "".join(text) != REPLY_TEXT:
            raise BenchError(f"baseline got text {''.join(text)!r}, expected {REPLY_TEXT!r}")
        return first_ns - t0

    async def close(self) -> None:
        await self.client.close()


class _ServiceSample(NamedTuple):
    ttfd: int
    create: int
    to_run_started: int


class _Service:
    """The service through the generated stubs over one channel."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = agent_service_pb2_grpc.AgentServiceStub(self.channel)

    async def new_session(self) -> str:
        response = await self.stub.CreateSession(
            session_api.CreateSessionRequest(session=session_pb2.Session(model_ref=MODEL_REF))
        )
        return str(response.session.identity.session_id)

    async def once(self) -> _ServiceSample:
        """Nanoseconds from issuing StreamTurn to the first assistant_delta (fresh session, untimed),
        plus the CreateSession time and the time to run_started, reported only as a breakdown."""
        c0 = time.perf_counter_ns()
        session_id = await self.new_session()
        create_ns = time.perf_counter_ns() - c0
        first_ns = started_ns = 0
        text: list[str] = []
        finished: Any = None
        t0 = time.perf_counter_ns()
        call = stream_turn(self.stub, session_id, PROMPT)
        async for response in call:
            event = response.event
            kind = event.WhichOneof("event")
            if kind == "assistant_delta":
                if not first_ns:
                    first_ns = time.perf_counter_ns()
                text.append(event.assistant_delta.text)
            elif kind == "run_started":
                started_ns = time.perf_counter_ns()
            elif kind == "run_finished":
                finished = event.run_finished
                break
        if finished is None:
            raise BenchError("StreamTurn ended without run_finished")
        if finished.outcome != event_pb2.RUN_OUTCOME_COMPLETED:
            raise BenchError(f"run did not complete: {finished}")
        if not first_ns or not started_ns:
            raise BenchError("StreamTurn produced no run_started or no assistant_delta")
        if "".join(text) != REPLY_TEXT:
            raise BenchError(f"service streamed text {''.join(text)!r}, expected {REPLY_TEXT!r}")
        return _ServiceSample(ttfd=first_ns - t0, create=create_ns, to_run_started=started_ns - t0)

    async def close(self) -> None:
        await self.channel.close()


_T = TypeVar("_T")


async def _timed(coro_fn: Callable[[], Awaitable[_T]], what: str, *procs: ManagedProcess) -> _T:
    try:
        async with asyncio.timeout(ITERATION_TIMEOUT):
            return await coro_fn()
    except TimeoutError as exc:
        for proc in procs:
            proc.check_alive()
        raise BenchError(f"{what} iteration timed out after {ITERATION_TIMEOUT}s") from exc


async def run(ctx: BenchContext) -> Result:
    started = time.time()
    load_before = loadavg()
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-ttfd-")
        fake, base_url = await start_fake(stack, workdir, ctx.cpus.fake, text=REPLY_TEXT)
        service, address = await start_service(stack, workdir, ctx.cpus.service, base_url)

        baseline = _Baseline(base_url)
        stack.push_async_callback(baseline.close)
        service_client = _Service(address)
        stack.push_async_callback(service_client.close)
        await asyncio.wait_for(service_client.channel.channel_ready(), ITERATION_TIMEOUT)

        base_ns: list[int] = []
        svc: list[_ServiceSample] = []

        async def one_pair() -> None:
            base_ns.append(await _timed(baseline.once, "baseline", fake))
            svc.append(await _timed(service_client.once, "service", fake, service))

        for _ in range(ctx.warmup):
            await one_pair()
        base_ns.clear()
        svc.clear()

        # Keep collector pauses of this process's warm-up garbage out of the measured window.
        gc.collect()
        gc.freeze()

        cpu0 = {p.name: process_cpu_seconds(p.pid) for p in (service, fake)}
        switches0 = {p.name: context_switches(p.pid) for p in (service, fake)}
        self_switches0 = context_switches(os.getpid())
        self_cpu0 = time.process_time()
        system0, steal0 = system_cpu_seconds()
        wall0 = time.perf_counter()
        for _ in range(ctx.iterations):
            await one_pair()
        wall = time.perf_counter() - wall0
        system1, steal1 = system_cpu_seconds()
        self_cpu = time.process_time() - self_cpu0
        cpu = {p.name: process_cpu_seconds(p.pid) - cpu0[p.name] for p in (service, fake)}
        switches = {p.name: context_switches(p.pid) - switches0[p.name] for p in (service, fake)}
        self_switches = context_switches(os.getpid()) - self_switches0
        gc.unfreeze()

        service.check_alive()
        fake.check_alive()
        affinity = {
            "service threads": thread_affinities(service.pid),
            "fake threads": thread_affinities(fake.pid),
            "client threads": thread_affinities(os.getpid()),
        }
        service_rss_kb = process_rss_kb(service.pid)

    others = max(0.0, (system1 - system0) - self_cpu - sum(cpu.values()))
    others_pct = 100 * others / wall
    notes = []
    if others_pct > 10:
        notes.append(
            f"other processes used {others_pct:.0f}% of a core during the measurement (of "
            f"{100 * len(ctx.cpus.allowed)}%): absolute figures include CPU queueing and the ratio "
            "penalises the path with more wake-ups; rerun on a quiet machine"
        )
    base = latency_stats(base_ns)
    svc_ns = [x.ttfd for x in svc]
    serv = latency_stats(svc_ns)
    to_started = latency_stats([x.to_run_started for x in svc])
    started_to_delta = latency_stats([x.ttfd - x.to_run_started for x in svc])
    create = latency_stats([x.create for x in svc])
    ratio = serv["p50_ms"] / base["p50_ms"]
    diff = serv["p50_ms"] - base["p50_ms"]
    ok = ratio <= RATIO_TARGET or diff <= DIFF_TARGET_MS
    n = ctx.iterations
    return {
        "benchmark": NAME,
        "title": TITLE,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 2),
        "environment": environment(ctx.cpus),
        "configuration": {
            "iterations": n,
            "warm-up iterations": ctx.warmup,
            "order": "interleaved baseline/service (ABAB)",
            "fake reply": f"{REPLY_TEXT!r} as 1 text_delta, no artificial delay",
            "model / max_tokens": f"{MODEL_REF} / {BASELINE_MAX_TOKENS} (service: session default)",
            "service flags": "--log-level WARNING, defaults otherwise (persistence on)",
            "service window": "StreamTurn issued → first assistant_delta (fresh session per turn)",
            "baseline window": "messages.create(stream=True) called → first text_delta (one client)",
            "baseline request": "the same tool definitions the service sends (its built-ins)",
            "thread affinity": "; ".join(f"{k} {', '.join(v)}" for k, v in affinity.items()),
            "loadavg before / after": f"{load_before} / {loadavg()}",
        },
        "latency_ms": {
            "baseline (bare SDK)": base,
            "service (gRPC)": serv,
            "  breakdown: StreamTurn → run_started": to_started,
            "  breakdown: run_started → assistant_delta": started_to_delta,
            "  untimed: CreateSession round trip": create,
        },
        "comparison": {
            "p50 ratio service/baseline": round(ratio, 3),
            "p50 difference (ms)": round(diff, 3),
            "p99 ratio service/baseline": round(serv["p99_ms"] / base["p99_ms"], 3),
            "mean difference (ms)": round(serv["mean_ms"] - base["mean_ms"], 3),
        },
        "cpu": {
            "service CPU per iteration, ms (CreateSession + turn)": round(cpu["general-agent serve"] * 1000 / n, 3),
            "fake CPU per iteration pair, ms": round(cpu["fake Anthropic server"] * 1000 / n, 3),
            "bench process CPU per pair, ms (client + baseline)": round(self_cpu * 1000 / n, 3),
            "bench process CPU %": round(100 * self_cpu / wall, 1),
            "service CPU %": round(100 * cpu["general-agent serve"] / wall, 1),
            "fake CPU %": round(100 * cpu["fake Anthropic server"] / wall, 1),
            "service context switches per iteration": round(switches["general-agent serve"] / n, 1),
            "fake context switches per pair": round(switches["fake Anthropic server"] / n, 1),
            "bench process context switches per pair": round(self_switches / n, 1),
            "service RSS at end, MB": round(service_rss_kb / 1024, 1),
            "other processes CPU % (machine noise)": round(others_pct, 1),
            "steal CPU %": round(100 * (steal1 - steal0) / wall, 1),
        },
        "target": {
            "rule": f"p50 ratio ≤ {RATIO_TARGET} OR p50 ≤ baseline + {DIFF_TARGET_MS} ms",
            "pass": ok,
            "detail": f"ratio {ratio:.3f} ({'≤' if ratio <= RATIO_TARGET else '>'} {RATIO_TARGET}), "
            f"difference {diff:+.3f} ms ({'≤' if diff <= DIFF_TARGET_MS else '>'} {DIFF_TARGET_MS} ms)",
        },
        "notes": notes,
        "samples_ms": {
            "baseline": [round(s / 1e6, 4) for s in base_ns],
            "service": [round(s / 1e6, 4) for s in svc_ns],
            "service_to_run_started": [round(x.to_run_started / 1e6, 4) for x in svc],
            "service_create_session": [round(x.create / 1e6, 4) for x in svc],
        },
    }
