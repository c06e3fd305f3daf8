"""`python -m bench.interleaved REV [--turns 500] [--prompt TEXT]`: the server of git revision REV (A, checked out in
a temporary worktree) and the server of this working tree (B), both pinned to the service core and started side by
side, with fresh-session turns alternating between them one at a time (ABBA...). Per side: the server process's CPU
per turn (from /proc over the whole run; a turn here is its session's creation and the turn), p50 time to the first
text delta, and the turn's p50, p99 and maximum.

This machine's speed moves 20–30% within minutes; `bench.ab` alternates whole benchmark runs and still sees that
drift. Alternating turn by turn puts both servers under the same conditions, so a change of 1–3% in CPU or 0.1 ms
in latency shows. There is no bare-SDK baseline here: it compares two servers, for a before/after figure.

At times the server started first runs slower: with both sides on the same code, the first-started one took 3–4%
more CPU per turn and 0.2–1.5 ms more per turn at p50 in runs of one quarter hour, and no more than the other in
later ones (cause not found). So the run has two halves, each with fresh servers, and the second half starts them
in the other order; `--check` runs this tree against itself to show what is left of any such bias.
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
from bench.common import REPO, BenchContext, heap_frozen, make_context, pin_self, plan_cpus, temp_workdir
from bench.harness import PROMPT, ServiceClient, start_bench_service, start_fast_fake
from bench.processes import process_cpu_seconds

WARMUP_TURNS = 40
# Lets the server finish what follows a turn's last event (the lease release, the export) before the next turn.
SETTLE_SECONDS = 0.003


@dataclass
class Side:
    """One server's figures over the run (times in ms)."""

    cpu_seconds: float = 0.0
    ttfd: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)

    def add(self, other: Side) -> None:
        self.cpu_seconds += other.cpu_seconds
        self.ttfd += other.ttfd
        self.total += other.total

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


def start_orders(trees: dict[str, Path]) -> list[dict[str, Path]]:
    """The two halves' trees in the order their servers start: A first, then B first."""
    return [dict(trees), dict(reversed(list(trees.items())))]


def run(rev: str | None, turns: int, prompt: str) -> dict[str, Side]:
    """Side A runs revision `rev` (None: this working tree, to measure the tool itself), side B this tree."""
    ctx = make_context(quick=False, cpus=plan_cpus())
    pin_self(ctx.cpus.client)
    if rev is None:
        return asyncio.run(_run(ctx, {"A": REPO, "B": REPO}, turns, prompt))
    with tempfile.TemporaryDirectory(prefix="bench-interleaved-") as scratch:
        tree_a = _worktree(rev, Path(scratch) / "a")
        try:
            return asyncio.run(_run(ctx, {"A": tree_a, "B": REPO}, turns, prompt))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree_a)], check=False)


async def _run(ctx: BenchContext, trees: dict[str, Path], turns: int, prompt: str) -> dict[str, Side]:
    sides = {name: Side() for name in trees}
    for ordered, half_turns in zip(start_orders(trees), (turns - turns // 2, turns // 2), strict=True):
        async with contextlib.AsyncExitStack() as stack:
            measured = await _measure(stack, ctx, ordered, half_turns, prompt)
        for name, side in measured.items():
            sides[name].add(side)
    return sides


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
    with heap_frozen():  # this process's own collections stay out of the turns
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
    parser.add_argument("rev", nargs="?", help="the git revision of side A (B is this working tree)")
    parser.add_argument("--check", action="store_true", help="both sides this working tree: the tool's own bias")
    parser.add_argument("--turns", type=int, default=500, help="turns per side (default 500)")
    parser.add_argument("--prompt", default=PROMPT, help="the turn's text (e.g. 'list the text files @bench-glob')")
    args = parser.parse_args()
    if (args.rev is None) != args.check:
        parser.error("give either a revision or --check")
    sides = run(args.rev, args.turns, args.prompt)
    first = "the working tree" if args.rev is None else args.rev
    print(f"A = {first}, B = the working tree; turns alternating one by one, start order swapped at half time")
    for name, side in sides.items():
        print(side.line(name))


if __name__ == "__main__":
    main()
