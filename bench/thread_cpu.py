"""`python -m bench.thread_cpu [--turns 400] [--mode fresh|same|create] [--syscalls]`: the server's CPU per turn,
thread by thread (the event loop, the SQLite writer, the reader connection, gRPC's poller...), from /proc after a
warm-up. `--syscalls` counts each thread's system calls per turn instead, with `strace -f` attached for the
measured turns (strace slows every call, so no CPU is reported then; Debian's `strace` package).

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
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import VENV_BIN, plan_cpus, temp_workdir
from bench.harness import ServiceClient, start_bench_service, start_fast_fake

_TICKS = os.sysconf("SC_CLK_TCK")
_DUMP_LINE = re.compile(r'^Thread (?:0x[0-9A-Fa-f]+ )?\(?(\d+)\)?.*?"(?P<name>[^"]*)"')
# A line of `strace -f`: the thread id, then the call's name (a resumed call, "<... name resumed>", is not counted).
_STRACE_LINE = re.compile(r"^(\d+) +(?P<call>[a-z_0-9]+)\(")
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


def count_syscalls(trace: Path) -> dict[int, Counter[str]]:
    """System calls by thread id in a `strace -f -o` file."""
    calls: dict[int, Counter[str]] = {}
    with trace.open() as lines:
        for line in lines:
            match = _STRACE_LINE.match(line)
            if match:
                calls.setdefault(int(match.group(1)), Counter())[match["call"]] += 1
    return calls


async def measure_syscalls(turns: int, mode: str) -> dict[str, Counter[str]]:
    """Each thread's system calls over `turns` turns, by thread name."""
    async with _warm_server(mode, "bench-syscalls-") as (pid, client, work):
        trace = Path(tempfile.mkdtemp(dir=work)) / "strace.txt"
        tracer = await asyncio.create_subprocess_exec(
            "strace", "-f", "-o", str(trace), "-p", str(pid), stderr=asyncio.subprocess.PIPE
        )
        assert tracer.stderr is not None
        await tracer.stderr.readline()  # "Process N attached with M threads": every thread is traced now
        await _turns(client, mode, turns)
        tracer.terminate()
        await tracer.wait()
        names = thread_names(pid)
        return {names.get(tid, f"native thread {tid}"): calls for tid, calls in count_syscalls(trace).items()}


def report_syscalls(calls: dict[str, Counter[str]], turns: int, top: int = 8) -> str:
    lines = []
    for name, counts in sorted(calls.items(), key=lambda item: -item[1].total()):
        shown = ", ".join(f"{call} {n / turns:.1f}" for call, n in counts.most_common(top))
        lines.append(f"{name:32s} {counts.total() / turns:7.1f}/turn: {shown}")
    return "\n".join(lines)


@contextlib.asynccontextmanager
async def _warm_server(mode: str, prefix: str) -> AsyncIterator[tuple[int, ServiceClient, Path]]:
    """A server (pinned as in the benchmarks) with the fast fake, after WARM_UP turns: its pid, a client and the
    work directory."""
    plan = plan_cpus()
    async with contextlib.AsyncExitStack() as stack:
        work = temp_workdir(stack, prefix)
        _, base_url = await start_fast_fake(stack, work, plan.fake)
        proc, address = await start_bench_service(stack, work, plan.service, base_url)
        client = ServiceClient(address)
        try:
            await _turns(client, mode, WARM_UP)
            yield proc.pid, client, work
        finally:
            await client.close()


async def measure(turns: int, mode: str) -> tuple[list[ThreadShare], float]:
    """Each thread's CPU per turn (busiest first) and the wall time per turn, over `turns` turns."""
    async with _warm_server(mode, "bench-thread-cpu-") as (pid, client, _):
        before, started = thread_cpu(pid), time.perf_counter()
        await _turns(client, mode, turns)
        after, wall = thread_cpu(pid), time.perf_counter() - started
        names = thread_names(pid)
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
    parser.add_argument("--syscalls", action="store_true", help="count system calls per thread (strace)")
    args = parser.parse_args()
    if args.syscalls:
        print(report_syscalls(asyncio.run(measure_syscalls(args.turns, args.mode)), args.turns))
        return
    shares, wall = asyncio.run(measure(args.turns, args.mode))
    print(report(shares, wall))


if __name__ == "__main__":
    main()
