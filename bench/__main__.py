"""`python -m bench [NAME ...] [--quick]`: run the registered benchmarks (all by default).

Each benchmark is an async function taking a `BenchContext` and returning a result dict (see
`bench.common.print_report`); add one by writing a module and registering it in `BENCHMARKS`. Every
benchmark runs in a fresh event loop. The exit code is 0 whatever the verdicts (benchmarks report, they
do not fail CI) and 1 if any benchmark raised.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from bench import deltas_1000, tool_round, ttfd
from bench.common import BenchFn, make_context, pin_self, plan_cpus, print_report, write_result


@dataclass(frozen=True)
class Benchmark:
    run: BenchFn
    description: str


BENCHMARKS: Final[dict[str, Benchmark]] = {
    ttfd.NAME: Benchmark(ttfd.run, ttfd.TITLE),
    tool_round.NAME: Benchmark(tool_round.run, tool_round.TITLE),
    deltas_1000.NAME: Benchmark(deltas_1000.run, deltas_1000.TITLE),
}


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    # Raised inside the event loop, this unwinds the running benchmark like Ctrl-C does, so its
    # cleanup kills the server and fake process groups and removes the temporary directories.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of the service against a bare anthropic SDK baseline. "
        "Iterations: 300 by default (tool_round 100, deltas_1000 50), BENCH_ITERATIONS to override, "
        "30 with --quick (tool_round 20, deltas_1000 10); warm-ups: 30 (tool_round 20, deltas_1000 10; "
        "fewer with --quick), BENCH_WARMUP to override.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="short smoke run (fewer iterations and warm-ups)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    if args.list:
        for name, bench in BENCHMARKS.items():
            print(f"{name}\t{bench.description}")
        return 0
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    names = list(dict.fromkeys(args.names)) or list(BENCHMARKS)

    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    cpus = plan_cpus()
    # The measuring client runs here; subprocesses get their own cores (see bench.common.spawning_on).
    pin_self(cpus.client)
    ctx = make_context(quick=args.quick, cpus=cpus)

    failed: list[str] = []
    for name in names:
        try:
            result = asyncio.run(BENCHMARKS[name].run(ctx))
        except KeyboardInterrupt:
            print(f"benchmark {name} interrupted", file=sys.stderr)
            return 130
        except Exception:
            failed.append(name)
            print(f"benchmark {name} FAILED:", file=sys.stderr)
            traceback.print_exc()
            continue
        print_report(result)
        path = write_result(result)
        print(f"results written to {path}")
    if failed:
        print(f"errors in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
