"""`python -m bench.call_counts [--turns 500] [--mode fresh|same] [--top 40] [--tree NAME ...]`: what one turn
calls on the server's event-loop thread, counted by cProfile, per turn.

py-spy (`bench.profile`) gives each function's share of the samples; this gives how many times a turn calls it and
its own and inclusive time per turn, which tells a function called too often from one that is slow. It starts the
fast fake and a server (pinned as in the benchmarks) with BENCH_CPROFILE_FILE set, which makes bench/serve_probe.py
toggle cProfile on the loop's thread at each SIGWINCH; after `--turns` warm-up turns (sessions created beforehand in
`fresh` mode) it profiles `--turns` turns and prints the functions with the most own time. cProfile slows Python
calls about twofold, so compare counts and the ranking, not the times, with the benchmarks. `--tree NAME` also
prints what the function NAME (its bare name, e.g. `_commit_now`) spends its inclusive time on. The raw stats
are kept as `DIR/server.prof` with `--keep DIR` (speedscope and snakeviz read them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench.common import pin_self, plan_cpus, temp_workdir
from bench.cprofile_toggle import ENV, TOGGLE
from bench.harness import ServiceClient, start_bench_service, start_fast_fake
from bench.processes import BenchError
from bench.profile import short_path


class Row(NamedTuple):
    name: str  # "file:line function", the file shortened
    calls: float  # per turn
    own_us: float  # per turn
    inclusive_us: float  # per turn


def _short(filename: str, line: int, function: str) -> str:
    return f"{short_path(filename)}:{line} {function}" if filename != "~" else function


def per_turn(stats_file: Path, turns: int) -> list[Row]:
    """Every function of the stats, its calls and times divided by `turns`, most own time first."""
    stats: dict[Any, Any] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    rows = [
        Row(_short(*key), calls / turns, own * 1e6 / turns, inclusive * 1e6 / turns)
        for key, (_, calls, own, inclusive, _) in stats.items()
    ]
    return sorted(rows, key=lambda r: -r.own_us)


def callees(stats_file: Path, function: str, turns: int) -> list[tuple[str, list[Row]]]:
    """For each function named `function`: what it calls, with the calls and inclusive time it spends there per
    turn, most time first."""
    stats: dict[Any, Any] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    found = []
    for key in stats:
        if key[2] != function:
            continue
        kids = [
            Row(_short(*callee), via[1] / turns, via[2] * 1e6 / turns, via[3] * 1e6 / turns)
            for callee, (*_, callers) in stats.items()
            if (via := callers.get(key)) is not None
        ]
        found.append((_short(*key), sorted(kids, key=lambda r: -r.inclusive_us)))
    return found


def report(rows: list[Row], top: int) -> str:
    lines = [f"{'calls/turn':>10} {'own µs':>9} {'incl. µs':>9}  function (per turn, under cProfile)"]
    lines += [f"{r.calls:10.1f} {r.own_us:9.1f} {r.inclusive_us:9.1f}  {r.name}" for r in rows[:top]]
    total = sum(r.own_us for r in rows)
    lines.append(f"{'':10} {total:9.1f} {'':9}  all functions' own time")
    return "\n".join(lines)


async def _turns(client: ServiceClient, sessions: list[str], mode: str, count: int) -> None:
    for _ in range(count):
        await client.turn(sessions.pop() if mode == "fresh" else sessions[0])


def _collect(stats: Path, keep: Path | None, seconds: float = 30.0) -> Path:
    """Waits for the server's stats file and copies it out of the work directory: to `keep`, or a temporary file."""
    deadline = time.monotonic() + seconds
    while not stats.exists():
        if time.monotonic() > deadline:
            raise BenchError("the server wrote no profile: is bench/serve_probe.py installing the toggle?")
        time.sleep(0.05)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        target = keep / "server.prof"
    else:
        handle, name = tempfile.mkstemp(prefix="bench-call-counts-", suffix=".prof")
        os.close(handle)
        target = Path(name)
    shutil.copy(stats, target)
    return target


async def measure(turns: int, mode: str, keep: Path | None) -> Path:
    """Profiles `turns` turns after as many warm-up turns; the stats file's path (in `keep` when given)."""
    plan = plan_cpus()
    async with contextlib.AsyncExitStack() as stack:
        work = temp_workdir(stack, "bench-call-counts-")
        stats = work / "server.prof"
        os.environ[ENV] = str(stats)
        try:
            _, base_url = await start_fast_fake(stack, work, plan.fake)
            proc, address = await start_bench_service(stack, work, plan.service, base_url)
        finally:
            del os.environ[ENV]
        client = ServiceClient(address)
        stack.push_async_callback(client.close)
        sessions = [await client.create() for _ in range(2 * turns if mode == "fresh" else 1)]
        await _turns(client, sessions, mode, turns)
        os.kill(proc.pid, TOGGLE)
        await _turns(client, sessions, mode, turns)
        os.kill(proc.pid, TOGGLE)
        return await asyncio.to_thread(_collect, stats, keep)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.call_counts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--mode", choices=("fresh", "same"), default="fresh")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME")
    parser.add_argument("--keep", type=Path, help="a directory to keep server.prof in")
    args = parser.parse_args()
    pin_self(plan_cpus().client)
    stats = asyncio.run(measure(args.turns, args.mode, args.keep))
    print(f"{args.turns} {args.mode}-session turns")
    print(report(per_turn(stats, args.turns), args.top))
    for name in args.tree:
        for function, kids in callees(stats, name, args.turns):
            print(f"\n{function}")
            for kid in kids[: args.top]:
                print(f"  {kid.calls:8.1f}/turn {kid.inclusive_us:9.1f} µs  {kid.name}")
    if args.keep is None:
        stats.unlink()


if __name__ == "__main__":
    main()
