"""B6: one tool round trip over gRPC, against the same sequence done with the bare `anthropic` SDK.

Target: the service's p50 is ≤ 1.2× the baseline's p50.

- Fake Anthropic server: its own process on the second core, `--script tool_round`: a request whose last
  message holds a tool_result gets the text "done"; any other request gets a `tool_use` of `read` on
  `bench.txt` (input streamed as `input_json_delta` chunks). Stateless, decided from each request.
- Service: `general-agent serve` on the first core. Each iteration creates a fresh session and writes
  `bench.txt` into its workspace (`<workspace-dir>/default/<session_id>/`), both untimed, then times
  StreamTurn issued → `run_finished`: model call 1 (tool_use), the built-in `read` tool, model call 2.
- Baseline: this process (second core) with one `AsyncAnthropic` client: `messages.create(stream=True)`
  consumed to the end (tool_use input joined from its deltas and parsed), the same file read locally and
  numbered like `read` does, then a second `messages.create(stream=True)` with the tool_result, consumed
  to the end. Both calls declare the same `read` tool.

Iterations alternate baseline, service, baseline, service … so machine noise hits both alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
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
    service_tool_definitions,
    service_workspace,
    start_fake,
    start_service,
    stream_turn,
    temp_workdir,
)
from general_agent.v1 import agent_service_pb2_grpc, event_pb2

NAME: Final = "tool_round"
TITLE: Final = "tool round trip: tool_use → local read → text (service over gRPC vs bare anthropic SDK)"

MODEL_REF: Final = "claude-haiku-4-5"
BASELINE_MAX_TOKENS: Final = 64_000  # what the service sends for this model (its catalog maximum)
PROMPT: Final = "read bench.txt"
TENANT: Final = "default"  # no auth configured
FILE_NAME: Final = "bench.txt"  # what the fake's tool_round script asks `read` for
FILE_TEXT: Final = "bench\n"
REPLY_TEXT: Final = "done"  # the fake's text after a tool_result
ITERATION_TIMEOUT: Final = 10.0

ITERATIONS: Final = 100
QUICK_ITERATIONS: Final = 20
WARMUP: Final = 20
QUICK_WARMUP: Final = 10

RATIO_TARGET: Final = 1.2

# The definitions the service sends (its built-in tools), so both sides send requests of the same size.
READ_TOOL: Final = service_tool_definitions()[0]


def _numbered(path: Path) -> str:
    """What `read` returns for a small text file: `cat -n` style lines."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=1))


class _BaselineSample(NamedTuple):
    total: int
    first_call: int  # call → first stream consumed (tool_use parsed)
    tool: int  # local read


class _Baseline:
    """The bare SDK sequence, the fastest path: raw `create(stream=True)` events, list-join accumulation."""

    def __init__(self, base_url: str, workspace: Path) -> None:
        self.client = anthropic.AsyncAnthropic(base_url=base_url, api_key="dummy", max_retries=0)
        self.workspace = workspace

    async def once(self) -> _BaselineSample:
        user: anthropic.types.MessageParam = {"role": "user", "content": PROMPT}
        call_id = tool_name = ""
        parts: list[str] = []
        t0 = time.perf_counter_ns()
        stream = await self.client.messages.create(
            model=MODEL_REF,
            max_tokens=BASELINE_MAX_TOKENS,
            messages=[user],
            tools=[READ_TOOL],
            stream=True,
        )
        async for event in stream:
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                call_id, tool_name = event.content_block.id, event.content_block.name
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                parts.append(event.delta.partial_json)
        t1 = time.perf_counter_ns()
        if tool_name != "read":
            raise BenchError(f"baseline: first reply was not a tool_use of read (got {tool_name!r})")
        arguments = json.loads("".join(parts))
        output = _numbered(self.workspace / str(arguments["path"]))
        t2 = time.perf_counter_ns()
        text: list[str] = []
        stream = await self.client.messages.create(
            model=MODEL_REF,
            max_tokens=BASELINE_MAX_TOKENS,
            messages=[
                user,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call_id, "name": tool_name, "input": arguments}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}]},
            ],
            tools=[READ_TOOL],
            stream=True,
        )
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text.append(event.delta.text)
        t3 = time.perf_counter_ns()
        if "".join(text) != REPLY_TEXT:
            raise BenchError(f"baseline got text {''.join(text)!r}, expected {REPLY_TEXT!r}")
        return _BaselineSample(total=t3 - t0, first_call=t1 - t0, tool=t2 - t1)

    async def close(self) -> None:
        await self.client.close()


class _ServiceSample(NamedTuple):
    total: int
    to_run_started: int  # StreamTurn → run_started event
    to_tool_call: int  # StreamTurn → tool_call event
    tool: int  # tool_call → tool_result event
    create: int  # CreateSession (untimed)


class _Service:
    """The service through the generated stubs over one channel."""

    def __init__(self, address: str, workspace_root: Path) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = agent_service_pb2_grpc.AgentServiceStub(self.channel)
        self.workspace_root = workspace_root

    async def once(self) -> _ServiceSample:
        session_id, create_ns = await new_session(self.stub, MODEL_REF)
        workspace = self.workspace_root / TENANT / session_id
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / FILE_NAME).write_text(FILE_TEXT, encoding="utf-8")

        started_ns = call_ns = result_ns = 0
        text: list[str] = []
        finished: Any = None
        t0 = time.perf_counter_ns()
        call = stream_turn(self.stub, session_id, PROMPT)
        async for response in call:
            event = response.event
            kind = event.WhichOneof("event")
            if kind == "assistant_delta":
                text.append(event.assistant_delta.text)
            elif kind == "run_started":
                started_ns = time.perf_counter_ns()
            elif kind == "tool_call":
                call_ns = time.perf_counter_ns()
                if event.tool_call.tool_name != "read":
                    raise BenchError(f"service called {event.tool_call.tool_name!r}, expected read")
            elif kind == "tool_result":
                result_ns = time.perf_counter_ns()
            elif kind == "tool_error":
                raise BenchError(f"service: read failed: {event.tool_error.error}")
            elif kind == "run_finished":
                finished = event.run_finished
                break
        end_ns = time.perf_counter_ns()
        if finished is None:
            raise BenchError("StreamTurn ended without run_finished")
        if finished.outcome != event_pb2.RUN_OUTCOME_COMPLETED:
            raise BenchError(f"run did not complete: {finished}")
        if not started_ns or not call_ns or not result_ns:
            raise BenchError("StreamTurn produced no run_started, tool_call or tool_result")
        if "".join(text) != REPLY_TEXT:
            raise BenchError(f"service streamed text {''.join(text)!r}, expected {REPLY_TEXT!r}")
        return _ServiceSample(
            total=end_ns - t0,
            to_run_started=started_ns - t0,
            to_tool_call=call_ns - t0,
            tool=result_ns - call_ns,
            create=create_ns,
        )

    async def close(self) -> None:
        await self.channel.close()


async def run(ctx: BenchContext) -> Result:
    iterations, warmup = ctx.counts(
        iterations=ITERATIONS, quick_iterations=QUICK_ITERATIONS, warmup=WARMUP, quick_warmup=QUICK_WARMUP
    )
    started = time.time()
    load_before = loadavg()
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-tool-round-")
        fake, base_url = await start_fake(stack, workdir, ctx.cpus.fake, script="tool_round")
        service, address = await start_service(stack, workdir, ctx.cpus.service, base_url)

        # The baseline reads its own copy, outside the service's workspace tree.
        baseline_dir = workdir / "baseline"
        baseline_dir.mkdir()
        (baseline_dir / FILE_NAME).write_text(FILE_TEXT, encoding="utf-8")
        baseline = _Baseline(base_url, baseline_dir)
        stack.push_async_callback(baseline.close)
        service_client = _Service(address, service_workspace(workdir))
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
    cpu = window.figures(n)
    cpu["bench process CPU per baseline iteration, ms"] = round(1000 * sum(base_cpu) / n, 3)
    cpu["bench process CPU per service iteration, ms (gRPC client)"] = round(
        1000 * (window.self_cpu - sum(base_cpu)) / n, 3
    )
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
            "fake reply": f"--script tool_round: tool_use read {{'path': {FILE_NAME!r}}} (3 input_json_delta "
            f"chunks), then {REPLY_TEXT!r} after the tool_result; no artificial delay",
            "file read": f"{FILE_NAME}, {len(FILE_TEXT.encode())} bytes, fresh session workspace per service turn",
            "model / max_tokens": f"{MODEL_REF} / {BASELINE_MAX_TOKENS} (service: session default)",
            "service flags": "--log-level WARNING, defaults otherwise (persistence on)",
            "service window": "StreamTurn issued → run_finished (fresh session per turn, created untimed)",
            "baseline window": "create(stream=True) → consumed → local read → create(stream=True) → consumed",
            "thread affinity": "; ".join(f"{k} {', '.join(v)}" for k, v in affinity.items()),
            "loadavg before / after": f"{load_before} / {loadavg()}",
        },
        "latency_ms": {
            "baseline (bare SDK)": b,
            "service (gRPC)": s,
            "  baseline: model call 1 (to tool_use parsed)": latency_stats([x.first_call for x in base]),
            "  baseline: local read": latency_stats([x.tool for x in base]),
            "  baseline: model call 2 (to stream end)": latency_stats([x.total - x.first_call - x.tool for x in base]),
            "  service: StreamTurn → run_started": latency_stats([x.to_run_started for x in svc]),
            "  service: run_started → tool_call": latency_stats([x.to_tool_call - x.to_run_started for x in svc]),
            "  service: tool_call → tool_result": latency_stats([x.tool for x in svc]),
            "  service: tool_result → run_finished": latency_stats([x.total - x.to_tool_call - x.tool for x in svc]),
            "  untimed: CreateSession round trip": latency_stats([x.create for x in svc]),
        },
        "comparison": {
            "p50 ratio service/baseline": round(ratio, 3),
            "p50 difference (ms)": round(s["p50_ms"] - b["p50_ms"], 3),
            "p99 ratio service/baseline": round(s["p99_ms"] / b["p99_ms"], 3),
            "mean difference (ms)": round(s["mean_ms"] - b["mean_ms"], 3),
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
    }
