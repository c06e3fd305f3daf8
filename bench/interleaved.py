"""`python -m bench.interleaved REV [--turns 500] [--prompt TEXT]`: the server of git revision REV (A, checked out in
a temporary worktree) and the server of this working tree (B), both pinned to the service core and started side by
side, with fresh-session turns alternating between them one at a time (ABBA...). Per side: the server process's CPU
per turn (from /proc over the whole run; a turn here is its session's creation and the turn), p50 time to the first
text delta, and the turn's p50, p99 and maximum.

This machine's speed moves 20–30% within minutes; `bench.ab` alternates whole benchmark runs and still sees that
drift. Alternating turn by turn puts both servers under the same conditions, so a change of 1–3% in CPU or 0.1 ms
in latency shows. There is no bare-SDK baseline here: it compares two servers, for a before/after figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.ab import _worktree
from bench.common import REPO, BenchContext, make_context, pin_self, plan_cpus, process_cpu_seconds, temp_workdir
from bench.harness import PROMPT, ServiceClient, start_bench_service, start_fast_fake

WARMUP_TURNS = 40
# Lets the server finish what follows a turn's last event (the lease release, the export) before the next turn.
SETTLE_SECONDS = 0.003


@dataclass
class Side:
    """One server's figures over the run (times in ms)."""

    cpu_seconds: float = 0.0
    ttfd: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def line(self, name: str) -> str:
        turns = len(self.total)
        ordered = sorted(self.total)
        return (
            f"{name}: server CPU per turn {self.cpu_seconds / turns * 1e3:.3f} ms, ttfd p50 "
            f"{statistics.median(self.ttfd):.3f} ms, turn p50 {statistics.median(ordered):.3f} / "
            f"p99 {ordered[min(turns - 1, int(turns * 0.99))]:.3f} / max {ordered[-1]:.3f} ms ({turns} turns)"
        )


def order(index: int) -> tuple[str, str]:
    """ABBA: each side goes first every other turn, so neither always follows the other."""
    return ("A", "B") if index % 2 == 0 else ("B", "A")


def run(rev: str, turns: int, prompt: str) -> dict[str, Side]:
    ctx = make_context(quick=False, cpus=plan_cpus())
    pin_self(ctx.cpus.client)
    with tempfile.TemporaryDirectory(prefix="bench-interleaved-") as scratch:
        tree_a = _worktree(rev, Path(scratch) / "a")
        try:
            return asyncio.run(_run(ctx, {"A": tree_a, "B": REPO}, turns, prompt))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree_a)], check=False)


async def _run(ctx: BenchContext, trees: dict[str, Path], turns: int, prompt: str) -> dict[str, Side]:
    async with contextlib.AsyncExitStack() as stack:
        return await _measure(stack, ctx, trees, turns, prompt)


async def _measure(
    stack: contextlib.AsyncExitStack, ctx: BenchContext, trees: dict[str, Path], turns: int, prompt: str
) -> dict[str, Side]:
    cpus = ctx.cpus
    workdir = temp_workdir(stack, "interleaved-")
    workspace = workdir / "workspace"
    workspace.mkdir()
    for i in range(5):
        (workspace / f"notes{i}.txt").write_text(f"file {i}\n")
    _fake, base_url = await start_fast_fake(stack, workdir, cpus.fake)
    servers = {}
    for name, tree in trees.items():
        side_dir = workdir / name
        side_dir.mkdir()
        process, address = await start_bench_service(
            stack, side_dir, cpus.service, base_url, workspace=workspace, tree=tree
        )
        client = ServiceClient(address)
        stack.push_async_callback(client.close)
        servers[name] = (process, client)
    for _process, client in servers.values():
        for _ in range(WARMUP_TURNS):
            await client.turn(await client.create(), prompt)
    sides = {name: Side() for name in servers}
    started = {name: process_cpu_seconds(process.pid) for name, (process, _) in servers.items()}
    for index in range(turns):
        for name in order(index):
            _process, client = servers[name]
            sample = await client.turn(await client.create(), prompt)
            await asyncio.sleep(SETTLE_SECONDS)
            sides[name].ttfd.append(sample.ttfd / 1e6)
            sides[name].total.append(sample.total / 1e6)
    for name, (process, _) in servers.items():
        sides[name].cpu_seconds = process_cpu_seconds(process.pid) - started[name]
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.interleaved", description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision of side A (B is this working tree)")
    parser.add_argument("--turns", type=int, default=500, help="turns per side (default 500)")
    parser.add_argument("--prompt", default=PROMPT, help="the turn's text (e.g. 'list the text files @bench-glob')")
    args = parser.parse_args()
    sides = run(args.rev, args.turns, args.prompt)
    print(f"A = {args.rev}, B = the working tree; turns alternating one by one")
    for name, side in sides.items():
        print(side.line(name))


if __name__ == "__main__":
    main()
