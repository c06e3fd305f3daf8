"""B2: a 1,000-delta turn over gRPC, against the same stream consumed with the bare `anthropic` SDK.

Target: the service's p50 turn time is ≤ 1.15× the baseline's p50.

- Fake Anthropic server: its own process on the second core, `--deltas 1000`: one text block streamed as
  exactly 1,000 `text_delta` events ("t0 ", "t1 ", …), sent as fast as it can write them.
- Service: `general-agent serve` on the first core. Each iteration creates a fresh session (untimed), then
  times StreamTurn issued → `run_finished`. The service coalesces deltas while a send is in flight, so the
  gRPC client receives fewer `assistant_delta` events than 1,000; their count is reported and the
  concatenated text must equal the fake's text exactly.
- Baseline: this process (second core), one `AsyncAnthropic` client, `messages.create(stream=True)`
  consumed to `message_stop` with a list-join of the text; timed from the call to `message_stop`.

Iterations alternate baseline, service, baseline, service … so machine noise hits both alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any, Final, NamedTuple

import anthropic
import grpc

from bench.common import (
    BenchContext,
    BenchError,
    Result,
    environment,
    latency_stats,
    loadavg,
    measure_pairs,
    new_session,
    start_fake,
    start_service,
    stream_turn,
    temp_workdir,
)
from general_agent.testing import text_deltas
from general_agent.v1 import agent_service_pb2_grpc, event_pb2

NAME: Final = "deltas_1000"
TITLE: Final = "a 1,000-delta turn, request → last event (service over gRPC vs bare anthropic SDK)"

MODEL_REF: Final = "claude-haiku-4-5"  # no thinking by default: one text block
BASELINE_MAX_TOKENS: Final = 64_000  # what the service sends for this model (its catalog maximum)
PROMPT: Final = "hi"
DELTAS: Final = 1000
EXPECTED_TEXT: Final = text_deltas(DELTAS).text  # what `--deltas 1000` streams
ITERATION_TIMEOUT: Final = 20.0

ITERATIONS: Final = 50
QUICK_ITERATIONS: Final = 10
WARMUP: Final = 10
QUICK_WARMUP: Final = 5

RATIO_TARGET: Final = 1.15


class _Sample(NamedTuple):
    total: int  # request issued → last event of the turn
    first: int  # request issued → first text delta
    deltas: int  # text deltas (baseline) / assistant_delta events (service) received
    create: int = 0  # service only: CreateSession (untimed)


class _Baseline:
    """The bare SDK call, the fastest path: raw `create(stream=True)` events, list-join accumulation."""

    def __init__(self, base_url: str) -> None:
        self.client = anthropic.AsyncAnthropic(base_url=base_url, api_key="dummy", max_retries=0)

    async def once(self) -> _Sample:
        first_ns = stop_ns = 0
        text: list[str] = []
        t0 = time.perf_counter_ns()
        stream = await self.client.messages.create(
            model=MODEL_REF,
            max_tokens=BASELINE_MAX_TOKENS,
            messages=[{"role": "user", "content": PROMPT}],
            stream=True,
        )
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                if not first_ns:
                    first_ns = time.perf_counter_ns()
                text.append(event.delta.text)
            elif event.type == "message_stop":
                stop_ns = time.perf_counter_ns()
        if not stop_ns:
            raise BenchError("baseline stream ended without message_stop")
        if "".join(text) != EXPECTED_TEXT:
            raise BenchError(f"baseline text differs from the fake's ({len(''.join(text))} chars)")
        return _Sample(total=stop_ns - t0, first=first_ns - t0, deltas=len(text))

    async def close(self) -> None:
        await self.client.close()


class _Service:
    """The service through the generated stubs over one channel."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = agent_service_pb2_grpc.AgentServiceStub(self.channel)

    async def once(self) -> _Sample:
        session_id, create_ns = await new_session(self.stub, MODEL_REF)
        first_ns = end_ns = 0
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
            elif kind == "run_finished":
                end_ns = time.perf_counter_ns()
                finished = event.run_finished
                break
        if finished is None:
            raise BenchError("StreamTurn ended without run_finished")
        if finished.outcome != event_pb2.RUN_OUTCOME_COMPLETED:
            raise BenchError(f"run did not complete: {finished}")
        if "".join(text) != EXPECTED_TEXT:
            raise BenchError(f"service text differs from the fake's ({len(''.join(text))} chars)")
        return _Sample(total=end_ns - t0, first=first_ns - t0, deltas=len(text), create=create_ns)

    async def close(self) -> None:
        await self.channel.close()


def _count_stats(values: list[int]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": round(statistics.fmean(ordered), 1),
        "p50": float(statistics.median(ordered)),
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
    }


async def run(ctx: BenchContext) -> Result:
    iterations, warmup = ctx.counts(
        iterations=ITERATIONS, quick_iterations=QUICK_ITERATIONS, warmup=WARMUP, quick_warmup=QUICK_WARMUP
    )
    started = time.time()
    load_before = loadavg()
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-deltas-")
        fake, base_url = await start_fake(stack, workdir, ctx.cpus.fake, deltas=DELTAS)
        service, address = await start_service(stack, workdir, ctx.cpus.service, base_url)

        baseline = _Baseline(base_url)
        stack.push_async_callback(baseline.close)
        service_client = _Service(address)
        stack.push_async_callback(service_client.close)
        await asyncio.wait_for(service_client.channel.channel_ready(), ITERATION_TIMEOUT)

        pairs = await measure_pairs(
            baseline.once,
            service_client.once,
            fake=fake,
            service=service,
            iterations=iterations,
            warmup=warmup,
            limit_s=ITERATION_TIMEOUT,
        )
        base, svc, base_cpu, window = pairs.base, pairs.service, pairs.base_cpu, pairs.window
        affinity, service_rss_kb = pairs.affinity, pairs.service_rss_kb

    b = latency_stats([x.total for x in base])
    s = latency_stats([x.total for x in svc])
    ratio = s["p50_ms"] / b["p50_ms"]
    n = iterations
    received = _count_stats([x.deltas for x in svc])
    cpu = window.figures(n)
    baseline_cpu_ms = 1000 * sum(base_cpu) / n
    cpu["bench process CPU per baseline iteration, ms"] = round(baseline_cpu_ms, 3)
    cpu["bench process CPU per service iteration, ms (gRPC client)"] = round(
        1000 * (window.self_cpu - sum(base_cpu)) / n, 3
    )
    cpu["service CPU per source delta, µs (incl. CreateSession)"] = round(1e6 * window.service_cpu / n / DELTAS, 2)
    cpu["baseline CPU per source delta, µs"] = round(1000 * baseline_cpu_ms / DELTAS, 2)
    cpu["service RSS at end, MB"] = round(service_rss_kb / 1024, 1)
    return {
        "benchmark": NAME,
        "title": TITLE,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 2),
        "environment": environment(ctx.cpus),
        "configuration": {
            "iterations": n,
            "warm-up iterations": warmup,
            "order": "interleaved baseline/service (ABAB)",
            "fake reply": f"--deltas {DELTAS}: {DELTAS} text_delta events, {len(EXPECTED_TEXT)} chars, no delay",
            "model / max_tokens": f"{MODEL_REF} / {BASELINE_MAX_TOKENS} (service: session default)",
            "service flags": "--log-level WARNING, defaults otherwise (persistence on)",
            "service window": "StreamTurn issued → run_finished (fresh session per turn, created untimed)",
            "baseline window": "messages.create(stream=True) called → message_stop (one client)",
            "text check": "concatenated deltas == the fake's text, every iteration, both sides",
            "thread affinity": "; ".join(f"{k} {', '.join(v)}" for k, v in affinity.items()),
            "loadavg before / after": f"{load_before} / {loadavg()}",
        },
        "latency_ms": {
            "baseline (bare SDK)": b,
            "service (gRPC)": s,
            "  baseline: call → first text_delta": latency_stats([x.first for x in base]),
            "  service: StreamTurn → first assistant_delta": latency_stats([x.first for x in svc]),
            "  untimed: CreateSession round trip": latency_stats([x.create for x in svc]),
        },
        "comparison": {
            "p50 ratio service/baseline": round(ratio, 3),
            "p50 difference (ms)": round(s["p50_ms"] - b["p50_ms"], 3),
            "p99 ratio service/baseline": round(s["p99_ms"] / b["p99_ms"], 3),
            "mean difference (ms)": round(s["mean_ms"] - b["mean_ms"], 3),
            "assistant_delta events received per turn, mean": received["mean"],
            "assistant_delta events received per turn, p50": received["p50"],
            "assistant_delta events received per turn, min / max": f"{received['min']:.0f} / {received['max']:.0f}",
            "baseline text_delta events per turn": base[0].deltas if base else 0,
            "text identical to the fake's": "yes, every iteration (checked)",
        },
        "cpu": cpu,
        "target": {
            "rule": f"p50 ratio ≤ {RATIO_TARGET}",
            "pass": ratio <= RATIO_TARGET,
            "detail": f"ratio {ratio:.3f} ({'≤' if ratio <= RATIO_TARGET else '>'} {RATIO_TARGET})",
        },
        "notes": window.notes(ctx.cpus),
        "samples_ms": {
            "baseline": [round(x.total / 1e6, 4) for x in base],
            "service": [round(x.total / 1e6, 4) for x in svc],
        },
        "assistant_delta_counts": [x.deltas for x in svc],
    }
