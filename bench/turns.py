"""Single-session turns against the bare SDK sending the identical request, interleaved (ABAB):

- `turn_fresh`: time to the first text delta and the whole text turn on a fresh session (created
  untimed, before the measured window), and the server's CPU per text turn against the bare client's
  CPU per turn (process CPU / turns, both measured in the same window). Then the transport floor
  (bench/transport_floor.py): a bare grpc.aio server replaying that turn's responses, timed the same way,
  the share of the overhead no Python gRPC front avoids.
- `turn_history`: one session grown to 200 history messages (100 turns); every turn's baseline body is
  checked equal to the body the service sent.
- `tool_round`: one local `glob` round (tool_use, run, tool_result, text); the baseline makes both calls
  and runs the same glob, sending the service's tool_result content; then the round's transport floor, as
  `turn_fresh`'s.
- `deltas_1000`: a 1,000-text-delta turn, request → end.
"""

from __future__ import annotations

import contextlib
import glob
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, NamedTuple

from bench.common import BenchContext, MeasuredWindow, Result, environment, loadavg, measure_pairs, temp_workdir
from bench.fast_fake import GLOB_INPUT, MARK_DELTAS, MARK_GLOB, deltas_text
from bench.harness import (
    PROMPT,
    BaselineClient,
    Conversation,
    ServiceClient,
    TurnSample,
    fake_figures,
    fake_get,
    fake_last,
    fake_stats,
    p50_ms,
    request_params,
    row,
    same_request,
    start_bench_service,
    start_fast_fake,
)
from bench.processes import BenchError
from bench.transport_floor import start_transport_floor

LIMIT_S: Final = 30.0


class _Rig:
    """The fake, the service and both clients of one benchmark, torn down by the exit stack."""

    def __init__(self, stack: contextlib.AsyncExitStack, ctx: BenchContext, prefix: str) -> None:
        self.stack, self.ctx, self.prefix = stack, ctx, prefix

    async def start(self) -> _Rig:
        self.workdir = temp_workdir(self.stack, self.prefix)
        self.workspace = self.workdir / "workspace"
        self.workspace.mkdir()
        for i in range(5):
            (self.workspace / f"notes{i}.txt").write_text(f"file {i}\n")
        self.fake, self.base_url = await start_fast_fake(self.stack, self.workdir, self.ctx.cpus.fake)
        self.service, address = await start_bench_service(
            self.stack, self.workdir, self.ctx.cpus.service, self.base_url, workspace=self.workspace
        )
        self.svc = ServiceClient(address)
        self.stack.push_async_callback(self.svc.close)
        self.base = BaselineClient(self.base_url)
        self.stack.push_async_callback(self.base.close)
        return self

    async def template(self, prompt: str = PROMPT) -> dict[str, Any]:
        """The body of a fresh session's first call (one untimed service turn)."""
        await self.svc.turn(await self.svc.create(), prompt)
        return fake_last(self.base_url)

    async def pairs(
        self,
        base_once: Callable[[], Awaitable[TurnSample]],
        svc_once: Callable[[], Awaitable[TurnSample]],
        n: int,
        w: int,
    ) -> tuple[list[TurnSample], list[TurnSample], list[float], MeasuredWindow]:
        fake_get(self.base_url, "/reset")
        got = await measure_pairs(
            base_once, svc_once, fake=self.fake, service=self.service, iterations=n, warmup=w, limit_s=LIMIT_S
        )
        self.fake_stats = fake_stats(self.base_url)
        for b, s in zip(got.base, got.service, strict=True):
            if b.text != s.text:
                raise BenchError(f"service text {s.text[:60]!r} differs from the baseline's {b.text[:60]!r}")
        return got.base, got.service, got.base_cpu, got.window

    def result(
        self,
        name: str,
        title: str,
        rows: list[dict[str, Any]],
        window: MeasuredWindow,
        n: int,
        requests: int,
        base_turn_ms: float,
        config: dict[str, Any],
    ) -> Result:
        fake = fake_figures(self.fake_stats, window.fake_cpu, requests, base_turn_ms)
        if not fake["fake fast enough"]:
            for r in rows:
                if r["baseline"] is not None and r["unit"] == "ms":
                    r["fake_fast"] = False
                    r["pass"] = False if r["pass"] else r["pass"]
        return {
            "benchmark": name,
            "title": title,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "environment": environment(self.ctx.cpus),
            "configuration": {**config, "iterations": n, "loadavg at end": loadavg()},
            "rows": rows,
            "fake": fake,
            "cpu": window.figures(n),
            "notes": window.notes(self.ctx.cpus),
        }


async def _fresh_sessions(svc: ServiceClient, count: int) -> list[str]:
    return [await svc.create() for _ in range(count)]


async def turn_fresh(ctx: BenchContext) -> Result:
    n, w = ctx.counts(iterations=200, quick_iterations=10, warmup=20, quick_warmup=3)
    async with contextlib.AsyncExitStack() as stack:
        rig = await _Rig(stack, ctx, "bench-fresh-").start()
        template = await rig.template()
        params = Conversation(template).request()
        if not same_request(params, template):
            raise BenchError(f"the baseline's request differs from the service's: {json.dumps(template)[:400]}")
        sessions = await _fresh_sessions(rig.svc, n + w)
        base, svc, base_cpu, window = await rig.pairs(
            lambda: rig.base.call(params), lambda: rig.svc.turn(sessions.pop()), n, w
        )
        floor = await _transport_floor(rig, lambda: rig.base.call(params), n, w, what="text turn")
    b_turn = p50_ms([s.total for s in base])
    cpu_service = window.service_cpu * 1000 / n
    cpu_base = sum(base_cpu[-n:]) * 1000 / n
    rows = [
        row("ttfd, fresh session", p50_ms([s.ttfd for s in svc]), p50_ms([s.ttfd for s in base]), max_overhead=1.0),
        row("text turn, fresh session", p50_ms([s.total for s in svc]), b_turn, max_overhead=1.5),
        row("CPU per text turn (server vs bare client)", cpu_service, cpu_base, unit="ms CPU", max_ratio=2.0),
        *floor.rows,
    ]
    config = {
        "reply": "10 text deltas",
        "request": f"{len(params.get('tools', []))} tools, max_tokens {params['max_tokens']}",
        "transport floor": floor.description,
    }
    return rig.result("turn_fresh", "fresh-session text turn: ttfd, turn, CPU", rows, window, n, 2 * n, b_turn, config)


class _Floor(NamedTuple):
    rows: list[dict[str, Any]]
    description: str


async def _transport_floor(
    rig: _Rig, base_once: Callable[[], Awaitable[TurnSample]], n: int, w: int, *, prompt: str = PROMPT, what: str
) -> _Floor:
    """The bare grpc.aio server replaying the responses of one service turn of `prompt` (bench/transport_floor.py),
    timed in pairs with `base_once` as the service was, so it sees the same idle time before each call."""
    responses = await rig.svc.responses(await rig.svc.create(), prompt)
    floor, address = await start_transport_floor(rig.stack, rig.workdir, rig.ctx.cpus.service, responses)
    client = ServiceClient(address)
    rig.stack.push_async_callback(client.close)
    got = await measure_pairs(
        base_once,
        lambda: client.turn("floor"),
        fake=rig.fake,
        service=floor,
        iterations=n,
        warmup=w,
        limit_s=LIMIT_S,
    )
    floor.kill()
    kinds = len(responses)
    rows = [
        row(
            f"transport floor of the {what}: bare grpc.aio, its {kinds} responses, ttfd",
            p50_ms([s.ttfd for s in got.service]),
            None,
        ),
        row(f"transport floor of the {what}: the whole stream", p50_ms([s.total for s in got.service]), None),
        row(
            f"transport floor of the {what}: server CPU per stream",
            got.window.service_cpu * 1000 / n,
            None,
            unit="ms CPU",
        ),
    ]
    description = (
        f"a grpc.aio server with no interceptors replays the {kinds} responses of one service {what}, on the"
        " service's core, timed in pairs with the bare SDK as the service was (report only)"
    )
    return _Floor(rows, description)


async def turn_history(ctx: BenchContext) -> Result:
    turns = 10 if ctx.quick else 100  # 100 turns: the history grows to 200 messages
    async with contextlib.AsyncExitStack() as stack:
        rig = await _Rig(stack, ctx, "bench-history-").start()
        template = await rig.template()
        sid = await rig.svc.create()
        conv = Conversation(template)
        pending: list[dict[str, Any]] = []

        async def base_once() -> TurnSample:
            pending.append(conv.request())
            return await rig.base.call(pending[-1])

        async def svc_once() -> TurnSample:
            sample = await rig.svc.turn(sid)
            captured = fake_last(rig.base_url)
            if not same_request(pending.pop(), captured):
                raise BenchError(f"turn {len(conv.history) // 2}: the baseline's body differs from the service's")
            conv.record(PROMPT, sample.text)
            return sample

        base, svc, base_cpu, window = await rig.pairs(base_once, svc_once, turns, 0)
        messages = len(conv.history)
    b_turn = p50_ms([s.total for s in base])
    rows = [
        row(f"text turn, history to {messages} messages", p50_ms([s.total for s in svc]), b_turn, max_overhead=1.5),
        row(
            f"CPU per text turn, history to {messages}",
            window.service_cpu * 1000 / turns,
            sum(base_cpu) * 1000 / turns,
            unit="ms CPU",
            max_ratio=2.0,
        ),
    ]
    config = {"session": f"one session, {turns} turns, every body checked equal to the service's"}
    return rig.result(
        "turn_history", "text turns on one growing session", rows, window, turns, 2 * turns, b_turn, config
    )


def _replace_ids(body: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(request_params(body)).replace(old, new))
    return out


async def tool_round(ctx: BenchContext) -> Result:
    n, w = ctx.counts(iterations=100, quick_iterations=8, warmup=10, quick_warmup=2)
    prompt = f"list the text files {MARK_GLOB}"
    async with contextlib.AsyncExitStack() as stack:
        rig = await _Rig(stack, ctx, "bench-tool-").start()
        await rig.template(prompt)
        second = fake_last(rig.base_url)
        first = json.loads(fake_get(rig.base_url, "/prev"))
        old_id = str(second["messages"][1]["content"][0]["id"])
        req1 = Conversation(first).request(prompt)
        if not same_request(req1, first):
            raise BenchError("the baseline's first call differs from the service's")
        workspace: Path = rig.workspace

        async def base_once() -> TurnSample:
            t0 = time.perf_counter_ns()
            call1 = await rig.base.call(req1)
            sorted(glob.glob(str(workspace / GLOB_INPUT["pattern"])))
            call2 = await rig.base.call(_replace_ids(second, old_id, call1.tool_ids[0]))
            return TurnSample(call1.ttfd, time.perf_counter_ns() - t0, call2.text)

        sessions = await _fresh_sessions(rig.svc, n + w)
        base, svc, _, window = await rig.pairs(base_once, lambda: rig.svc.turn(sessions.pop(), prompt), n, w)
        floor = await _transport_floor(rig, base_once, n, w, prompt=prompt, what="tool round")
    b_turn = p50_ms([s.total for s in base])
    rows = [row("one local tool round (glob)", p50_ms([s.total for s in svc]), b_turn, max_overhead=2.5), *floor.rows]
    config = {
        "round": "tool_use glob (2 input_json_deltas) → tool_result → 10 text deltas",
        "transport floor": floor.description,
    }
    return rig.result("tool_round", "one local tool round", rows, window, n, 4 * n, b_turn / 2, config)


async def deltas_1000(ctx: BenchContext) -> Result:
    n, w = ctx.counts(iterations=50, quick_iterations=4, warmup=5, quick_warmup=1)
    async with contextlib.AsyncExitStack() as stack:
        rig = await _Rig(stack, ctx, "bench-deltas-").start()
        template = await rig.template(MARK_DELTAS)
        params = Conversation(template).request(MARK_DELTAS)
        if not same_request(params, template):
            raise BenchError("the baseline's request differs from the service's")
        sessions = await _fresh_sessions(rig.svc, n + w)
        base, svc, _, window = await rig.pairs(
            lambda: rig.base.call(params), lambda: rig.svc.turn(sessions.pop(), MARK_DELTAS), n, w
        )
        if svc[0].text != deltas_text():
            raise BenchError("the service's text differs from the fake's 1,000 deltas")
    b_turn = p50_ms([s.total for s in base])
    rows = [row("1,000-delta turn", p50_ms([s.total for s in svc]), b_turn, max_ratio=1.1)]
    return rig.result(
        "deltas_1000", "a 1,000-delta turn", rows, window, n, 2 * n, b_turn, {"reply": "1,000 text deltas"}
    )
