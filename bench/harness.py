"""What the capacity benchmarks share: the fast fake, the service under the lag probe, the service and
bare-SDK clients, the baseline's copy of the service's request, and the rows of the summary table.

The baseline sends the IDENTICAL request the service sent: `Conversation` rebuilds the service's body
(model, max_tokens, system, tools, history with the same cache breakpoints) from a body the fast fake
captured, and the history benchmark checks every turn's rebuilt body against the captured one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

import anthropic
import grpc

from bench.common import REPO, http_clients, service_env, stream_turn
from bench.processes import READY_TIMEOUT, BenchError, ManagedProcess, start_announcing, without_service_settings
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, session_messages_pb2, session_pb2

MODEL_REF: Final = "claude-haiku-4-5"  # no thinking by default: the first block is text
PROMPT: Final = "hi"
# A turn that takes longer than this is a hung server (a dead event loop keeps the process and its port alive),
# not a slow one: the slowest benchmark turn, the first after resuming 10,000 messages, takes well under a second.
TURN_DEADLINE_S: Final = 120.0
_EPHEMERAL: Final = {"type": "ephemeral"}


# --------------------------------------------------------------------------- processes


async def start_fast_fake(stack: contextlib.AsyncExitStack, workdir: Path, cpu: int) -> tuple[ManagedProcess, str]:
    env = without_service_settings()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    argv = [sys.executable, "-m", "bench.fast_fake", "--port", "0"]
    proc, data = await start_announcing(
        stack, workdir, name="fast fake model", slug="fast-fake", argv=argv, env=env, cpu=cpu
    )
    return proc, str(data["base_url"])


def fake_get(base_url: str, path: str) -> bytes:
    with urllib.request.urlopen(base_url + path, timeout=10) as response:  # noqa: S310 (loopback fake)
        return bytes(response.read())


def fake_stats(base_url: str) -> dict[str, float]:
    data: dict[str, float] = json.loads(fake_get(base_url, "/stats"))
    return data


def fake_last(base_url: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fake_get(base_url, "/last"))
    return data


async def start_bench_service(
    stack: contextlib.AsyncExitStack,
    workdir: Path,
    cpu: int | tuple[int, ...],
    base_url: str,
    *,
    state: Path | None = None,
    workspace: Path | None = None,
    lag_file: Path | None = None,
    timeline_file: Path | None = None,
    extra_args: tuple[str, ...] = (),
    ready_timeout: float = READY_TIMEOUT,
    tree: Path = REPO,
) -> tuple[ManagedProcess, str]:
    """`general-agent serve` (through bench.serve_probe) on `cpu` (a core or a set of cores); `state` may be
    reused across restarts. `tree`: the checkout whose code the server runs (another revision's worktree).
    `lag_file` / `timeline_file`: the loop-lag probe's and the timeline marks' files (bench/serve_probe.py)."""
    state = state or workdir / "state"
    workspace = workspace or workdir / "workspace"
    state.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    ready = workdir / "service-ready.json"
    ready.unlink(missing_ok=True)
    env = service_env(base_url)
    if tree == REPO:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    else:
        env["PYTHONPATH"] = os.pathsep.join(str(tree / part) for part in ("", "server/src", "clients/python/src"))
    if lag_file is not None:
        env["BENCH_LAG_FILE"] = str(lag_file)
    if timeline_file is not None:
        env["BENCH_TIMELINE_FILE"] = str(timeline_file)
    argv = [sys.executable, "-m", "bench.serve_probe", "serve", "--listen", "127.0.0.1:0"]
    argv += ["--state-dir", str(state), "--workspace-dir", str(workspace), "--ready-file", str(ready)]
    argv += ["--log-level", "WARNING", *extra_args]
    proc = ManagedProcess(
        name="general-agent serve",
        argv=argv,
        env=env,
        cwd=workdir,
        log_path=workdir / "service.log",
        ready_file=ready,
        cpu=cpu,
    )
    stack.callback(proc.kill)
    proc.start()
    data = await proc.wait_ready(ready_timeout)
    return proc, str(data["address"])


# --------------------------------------------------------------------------- clients


class TurnSample(NamedTuple):
    ttfd: int  # ns, request → first text delta
    total: int  # ns, request → end of the turn (run_finished / message_stop of the last call)
    text: str
    tool_ids: tuple[str, ...] = ()


@contextlib.asynccontextmanager
async def _turn_deadline(session_id: str, seconds: float) -> Any:
    """Fail a turn that outlives `seconds` with a BenchError naming the session, instead of waiting forever."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise BenchError(f"service turn on {session_id} got no run_finished within {seconds:g} s") from None


class ServiceClient:
    """The service through the generated stubs over one channel (`options`: its channel arguments)."""

    def __init__(
        self, address: str, options: Sequence[tuple[str, Any]] = (), turn_deadline_s: float = TURN_DEADLINE_S
    ) -> None:
        self.turn_deadline_s = turn_deadline_s
        self.channel = grpc.aio.insecure_channel(address, options=options)
        self.stub = agent_service_pb2_grpc.AgentServiceStub(self.channel)

    async def create(self, model_ref: str = MODEL_REF) -> str:
        created = await self.stub.CreateSession(
            session_messages_pb2.CreateSessionRequest(session=session_pb2.Session(model_ref=model_ref))
        )
        return str(created.session.identity.session_id)

    async def turn(self, session_id: str, prompt: str = PROMPT) -> TurnSample:
        first = 0
        text: list[str] = []
        finished: Any = None
        t0 = time.perf_counter_ns()
        async with _turn_deadline(session_id, self.turn_deadline_s):
            async for response in stream_turn(self.stub, session_id, prompt):
                event = response.event
                kind = event.WhichOneof("event")
                if kind == "assistant_delta":
                    if not first:
                        first = time.perf_counter_ns()
                    text.append(event.assistant_delta.text)
                elif kind == "run_finished":
                    finished = event.run_finished
                    break
        end = time.perf_counter_ns()
        if finished is None or finished.outcome != event_pb2.RUN_OUTCOME_COMPLETED:
            raise BenchError(f"service turn did not complete: {finished}")
        return TurnSample(ttfd=(first or end) - t0, total=end - t0, text="".join(text))

    async def responses(self, session_id: str, prompt: str = PROMPT) -> list[bytes]:
        """One turn's StreamTurnResponses as the service serialised them, run_finished last."""
        got: list[bytes] = []
        async with _turn_deadline(session_id, self.turn_deadline_s):
            async for response in stream_turn(self.stub, session_id, prompt):
                got.append(response.SerializeToString())
                if response.event.WhichOneof("event") == "run_finished":
                    break
        return got

    async def close(self) -> None:
        await self.channel.close()


class BaselineClient:
    """The bare SDK: one AsyncAnthropic client configured as the service's, raw `create(stream=True)`."""

    def __init__(self, base_url: str) -> None:
        # The bare SDK's own HTTP client (httpx), or its aiohttp transport with `--baseline-http-client aiohttp`.
        aiohttp_client = http_clients()[1] == "aiohttp"
        self.client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key="dummy",
            max_retries=2,
            timeout=600.0,
            default_headers={"accept-encoding": "identity"},
            http_client=anthropic.DefaultAioHttpClient(timeout=600.0) if aiohttp_client else None,
        )

    async def call(self, params: dict[str, Any]) -> TurnSample:
        first = 0
        text: list[str] = []
        tool_ids: list[str] = []
        stopped = False
        t0 = time.perf_counter_ns()
        stream = await self.client.messages.create(**params, stream=True)
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                if not first:
                    first = time.perf_counter_ns()
                text.append(event.delta.text)
            elif event.type == "content_block_start" and event.content_block.type == "tool_use":
                tool_ids.append(event.content_block.id)
            elif event.type == "message_stop":
                stopped = True
        end = time.perf_counter_ns()
        if not stopped:
            raise BenchError("baseline stream ended without message_stop")
        return TurnSample(ttfd=(first or end) - t0, total=end - t0, text="".join(text), tool_ids=tuple(tool_ids))

    async def close(self) -> None:
        await self.client.close()


def request_params(body: dict[str, Any]) -> dict[str, Any]:
    """SDK keyword arguments for a captured Messages body (everything but `stream`)."""
    return {k: v for k, v in body.items() if k != "stream"}


@dataclass
class Conversation:
    """The baseline's side of one session: the service's static request parts (from a captured body of a
    fresh session's first call) and a history grown as the service grows it, so turn k sends the body the
    service sends at turn k."""

    template: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)

    def request(self, prompt: str = PROMPT) -> dict[str, Any]:
        user = {"role": "user", "content": [{"type": "text", "text": prompt, "cache_control": _EPHEMERAL}]}
        static = {k: v for k, v in self.template.items() if k not in ("messages", "stream")}
        return {**static, "messages": [*self.history, user]}

    def record(self, prompt: str, reply: str) -> None:
        self.history.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
        self.history.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})


def same_request(built: dict[str, Any], captured: dict[str, Any]) -> bool:
    return request_params(built) == request_params(captured)


# --------------------------------------------------------------------------- rows of the summary table


def p50_ms(samples_ns: list[int]) -> float:
    ordered = sorted(samples_ns)
    return ordered[len(ordered) // 2] / 1e6 if ordered else float("nan")


def row(
    measure: str,
    service: float,
    baseline: float | None,
    *,
    unit: str = "ms",
    max_overhead: float | None = None,
    max_ratio: float | None = None,
    min_ratio: float | None = None,
    max_value: float | None = None,
    fake_fast: bool = True,
) -> dict[str, Any]:
    """One measure: service, baseline, ratio, overhead and the verdict against its target. A latency or
    CPU ratio never passes when the fake was slower than 20% of the baseline's turn."""
    ratio = service / baseline if baseline else None
    overhead = service - baseline if baseline is not None else None
    checks: list[tuple[str, bool]] = []
    if max_overhead is not None and overhead is not None:
        checks.append((f"overhead ≤ {max_overhead} {unit}", overhead <= max_overhead))
    if max_ratio is not None and ratio is not None:
        checks.append((f"ratio ≤ {max_ratio}", ratio <= max_ratio))
    if min_ratio is not None and ratio is not None:
        checks.append((f"ratio ≥ {min_ratio}", ratio >= min_ratio))
    if max_value is not None:
        checks.append((f"≤ {max_value} {unit}", service <= max_value))
    passed = all(ok for _, ok in checks) if checks else None
    if passed and baseline is not None and not fake_fast:
        passed = False
    return {
        "measure": measure,
        "unit": unit,
        "service": round(service, 4),
        "baseline": None if baseline is None else round(baseline, 4),
        "ratio": None if ratio is None else round(ratio, 3),
        "overhead": None if overhead is None else round(overhead, 4),
        "target": "; ".join(text for text, _ in checks) or "report only",
        "pass": passed,
        "fake_fast": fake_fast,
    }


def fake_figures(stats: dict[str, float], cpu_s: float, requests: int, baseline_turn_ms: float) -> dict[str, Any]:
    """The fake's own time per request (self-timed over the window's requests, and its whole process CPU)
    against 20% of the baseline's turn."""
    per_request_cpu = cpu_s * 1000 / requests if requests else float("nan")
    self_timed = stats["busy_ms"] / stats["requests"] if stats["requests"] else float("nan")
    limit = 0.2 * baseline_turn_ms
    return {
        "fake self-timed ms per request": round(self_timed, 4),
        "fake process CPU ms per request": round(per_request_cpu, 4),
        "20% of baseline turn p50, ms": round(limit, 4),
        "fake fast enough": per_request_cpu < limit,
    }
