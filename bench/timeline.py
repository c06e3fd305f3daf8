"""`python -m bench.timeline [--turns 100] [--warmup 20] [--prompt TEXT] [--idle-ms 10]`: where one turn's time goes.

Starts the fast fake and a server (pinned as in the benchmarks) with bench/timeline_marks.py's marks, runs
`--turns` fresh-session turns one at a time (sessions created beforehand, `--idle-ms` of idleness before each
turn) and prints every mark's median time in ms from the StreamTurn handler's start (`rpc>`), in order, the
client's marks (its call, each event it received) on the same clock: perf_counter is CLOCK_MONOTONIC, shared by
the processes. `tag#2` is the second mark of that tag in a turn; `n` is in how many turns it was seen. Each mark
costs a few microseconds, so compare its segments, not its totals, with the benchmarks. `--prompt
"list the text files @bench-glob"` times a glob tool round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import time
from collections import defaultdict
from pathlib import Path

from bench.common import heap_frozen, make_context, pin_self, plan_cpus, stream_turn, temp_workdir
from bench.harness import PROMPT, ServiceClient, start_bench_service, start_fast_fake
from bench.processes import BenchError

Marks = list[tuple[str, int]]


def _ask_for_marks(pid: int, path: Path) -> None:
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)


def _read_marks(path: Path) -> Marks | None:
    if not path.exists():
        return None
    return [(str(tag), int(ns)) for tag, ns in json.loads(path.read_text())]


async def _dump(pid: int, path: Path) -> Marks:
    """The server's marks since the previous dump (SIGUSR2; the file appears atomically)."""
    _ask_for_marks(pid, path)
    for _ in range(500):
        marks = _read_marks(path)
        if marks is not None:
            return marks
        await asyncio.sleep(0.01)
    raise BenchError("the server did not write its timeline marks")


async def _client_turn(svc: ServiceClient, session_id: str, prompt: str) -> Marks:
    marks: Marks = [("client.send", time.perf_counter_ns())]
    async for response in stream_turn(svc.stub, session_id, prompt):
        kind = response.event.WhichOneof("event")
        marks.append((f"client.{kind}", time.perf_counter_ns()))
        if kind == "run_finished":
            break
    return marks


def _turns(server: Marks) -> list[Marks]:
    """The server's marks cut into turns at each `rpc>`; marks before the first one are dropped."""
    turns: list[Marks] = []
    for tag, ns in server:
        if tag == "rpc>":
            turns.append([])
        if turns:
            turns[-1].append((tag, ns))
    return turns


def table(server: Marks, clients: list[Marks]) -> list[tuple[float, str, int]]:
    """(median ms from rpc>, tag#k, turns seen) for every mark, in order of the median."""
    turns = _turns(server)
    if len(turns) != len(clients):
        raise BenchError(f"{len(turns)} server turns marked for {len(clients)} client turns")
    offsets: dict[str, list[float]] = defaultdict(list)
    for marks, client in zip(turns, clients, strict=True):
        start = marks[0][1]
        seen: dict[str, int] = defaultdict(int)
        for tag, ns in [*marks, *client]:
            seen[tag] += 1
            offsets[f"{tag}#{seen[tag]}"].append((ns - start) / 1e6)
    return sorted((statistics.median(v), key, len(v)) for key, v in offsets.items())


async def run(turns: int, warmup: int, prompt: str, idle_s: float) -> list[tuple[float, str, int]]:
    ctx = make_context(quick=False, cpus=plan_cpus())
    pin_self(ctx.cpus.client)
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-timeline-")
        marks_file = workdir / "timeline.json"
        fake, base_url = await start_fast_fake(stack, workdir, ctx.cpus.fake)
        service, address = await start_bench_service(
            stack, workdir, ctx.cpus.service, base_url, timeline_file=marks_file
        )
        svc = ServiceClient(address)
        stack.push_async_callback(svc.close)
        sessions = [await svc.create() for _ in range(warmup + turns)]
        for session_id in sessions[:warmup]:
            await _client_turn(svc, session_id, prompt)
        await _dump(service.pid, marks_file)  # the warm-up's marks and the sessions' creation
        clients: list[Marks] = []
        with heap_frozen():  # this process's own collections stay out of the turns
            for session_id in sessions[warmup:]:
                await asyncio.sleep(idle_s)
                clients.append(await _client_turn(svc, session_id, prompt))
        await asyncio.sleep(0.05)  # the last turn's trailing marks (a commit after run_finished)
        server = await _dump(service.pid, marks_file)
        fake.check_alive()
    return table(server, clients)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--idle-ms", type=float, default=10.0, help="idle time before each turn")
    args = parser.parse_args()
    if args.turns < 1 or args.warmup < 0 or args.idle_ms < 0:
        parser.error("--turns must be at least 1, --warmup and --idle-ms at least 0")
    rows = asyncio.run(run(args.turns, args.warmup, args.prompt, args.idle_ms / 1000))
    print(f"{'ms from rpc>':>12}  mark (turns seen)")
    for median, key, seen in rows:
        print(f"{median:12.3f}  {key} ({seen})")


if __name__ == "__main__":
    main()
