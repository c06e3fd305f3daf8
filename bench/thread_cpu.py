"""`python -m bench.thread_cpu [--turns 400] [--mode fresh|same|create]`: the server's CPU per turn, thread by
thread (the event loop, the SQLite writer, the reader connection, gRPC's poller...), from /proc after a warm-up.

The process CPU a benchmark reports is the sum over these threads; the server runs pinned to one core, so a
helper thread's CPU is taken from the event loop's. Thread names come from `py-spy dump` (Python does not name
its threads to the OS). `fresh` is CreateSession plus a text turn, as turn_fresh; `same` a text turn on one
session; `create` CreateSession alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import VENV_BIN, plan_cpus, temp_workdir
from bench.harness import ServiceClient, start_bench_service, start_fast_fake

_TICKS = os.sysconf("SC_CLK_TCK")
_DUMP_LINE = re.compile(r'^Thread (?:0x[0-9A-Fa-f]+ )?\(?(\d+)\)?.*?"(?P<name>[^"]*)"')
WARM_UP = 100


@dataclass(frozen=True)
class ThreadShare:
    name: str
    ms_per_turn: float


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of every thread of `pid`, by thread id."""
    seconds: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / _TICKS
    return seconds


def thread_names(pid: int) -> dict[int, str]:
    """Python's names of the threads (py-spy dump); native threads are left out."""
    dump = subprocess.run(
        [str(VENV_BIN / "py-spy"), "dump", "--pid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    names: dict[int, str] = {}
    for line in dump.splitlines():
        match = _DUMP_LINE.match(line)
        if match:
            names[int(match.group(1))] = match["name"]
    return names


async def _turns(client: ServiceClient, mode: str, count: int) -> None:
    session_id = await client.create()
    for _ in range(count):
        if mode == "fresh":
            await client.turn(await client.create())
        elif mode == "create":
            await client.create()
        else:
            await client.turn(session_id)


async def measure(turns: int, mode: str) -> tuple[list[ThreadShare], float]:
    """Each thread's CPU per turn (busiest first) and the wall time per turn, over `turns` turns."""
    plan = plan_cpus()
    async with contextlib.AsyncExitStack() as stack:
        work = temp_workdir(stack, "bench-thread-cpu-")
        _, base_url = await start_fast_fake(stack, work, plan.fake)
        proc, address = await start_bench_service(stack, work, plan.service, base_url)
        client = ServiceClient(address)
        try:
            await _turns(client, mode, WARM_UP)
            before, started = thread_cpu(proc.pid), time.perf_counter()
            await _turns(client, mode, turns)
            after, wall = thread_cpu(proc.pid), time.perf_counter() - started
            names = thread_names(proc.pid)
        finally:
            await client.close()
    shares = [
        ThreadShare(names.get(tid, f"native thread {tid}"), 1000 * (spent - before.get(tid, 0.0)) / turns)
        for tid, spent in after.items()
    ]
    return sorted((s for s in shares if s.ms_per_turn > 0), key=lambda s: -s.ms_per_turn), 1000 * wall / turns


def report(shares: list[ThreadShare], wall_ms: float) -> str:
    lines = [f"{'thread':40s} {'ms CPU/turn':>11s}"]
    lines += [f"{s.name:40s} {s.ms_per_turn:11.2f}" for s in shares]
    lines.append(f"{'total':40s} {sum(s.ms_per_turn for s in shares):11.2f}   (wall {wall_ms:.2f} ms/turn)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--mode", choices=("fresh", "same", "create"), default="fresh")
    args = parser.parse_args()
    shares, wall = asyncio.run(measure(args.turns, args.mode))
    print(report(shares, wall))


if __name__ == "__main__":
    main()
