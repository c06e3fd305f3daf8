"""`python -m bench.ab REV [--rounds 3] [--quick] [NAME ...]`: the benchmarks of the tree at git revision REV (A,
checked out in a temporary worktree) and of this working tree (B), run alternately ABAB, with the median of every
figure per side.

On a shared machine the baseline's own figures move 10-30% between runs minutes apart, so a before/after figure
from two separate `python -m bench` runs says little about a change of a few percent; interleaving the two trees
and taking medians does. Each side runs `python -m bench NAME ...` in its own tree with that tree's code on
PYTHONPATH (the server subprocesses too). Per figure: service, baseline, overhead and ratio, as medians over
the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import REPO


def _worktree(rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(into), rev], check=True)
    return into


def _run(tree: Path, names: list[str], *, quick: bool) -> list[dict[str, Any]]:
    """The rows of one `python -m bench` run in `tree` (from its results summary)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(tree / p) for p in ("", "server/src", "clients/python/src"))
    argv = [sys.executable, "-m", "bench", *names, *(["--quick"] if quick else [])]
    subprocess.run(argv, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((tree / "bench" / "results" / ("summary-quick.json" if quick else "summary.json")).read_text())
    rows: list[dict[str, Any]] = summary["rows"]
    return rows


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def report(sides: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    lines = [f"{'measure':58s} {'side':4s} {'service':>9s} {'baseline':>9s} {'overhead':>9s} {'ratio':>6s}"]
    for measure in dict.fromkeys(m for side in sides.values() for m in side):
        for name, side in sides.items():
            rows = side.get(measure, [])
            figures = [_median(rows, k) for k in ("service", "baseline", "overhead", "ratio")]
            shown = ["—" if f is None else f"{f:.3f}" for f in figures]
            lines.append(f"{measure[:58]:58s} {name:4s} {shown[0]:>9s} {shown[1]:>9s} {shown[2]:>9s} {shown[3]:>6s}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision of side A (B is this working tree)")
    parser.add_argument("names", nargs="*", default=["turn_fresh"], help="benchmarks (default turn_fresh)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="each run with --quick (a smoke check of this tool)")
    args = parser.parse_intermixed_args()
    sides: dict[str, dict[str, list[dict[str, Any]]]] = {"A": defaultdict(list), "B": defaultdict(list)}
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as scratch:
        tree_a = _worktree(args.rev, Path(scratch) / "a")
        try:
            for round_number in range(args.rounds):
                for name, tree in (("A", tree_a), ("B", REPO)):
                    print(f"round {round_number + 1}/{args.rounds}: {name}", file=sys.stderr)
                    for row in _run(tree, args.names, quick=args.quick):
                        sides[name][row["measure"]].append(row)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree_a)], check=False)
    print(f"A = {args.rev}, B = the working tree; medians of {args.rounds} alternating rounds")
    print(report(sides))


if __name__ == "__main__":
    main()
