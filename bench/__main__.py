"""`python -m bench [NAME ...] [--quick]`: run the registered benchmarks (all by default).

Each benchmark is an async function taking a `BenchContext` and returning a result dict whose `rows` are
measures of the summary table (bench.harness.row); every benchmark runs in a fresh event loop. One table
of every row is printed at the end and written with all results to `bench/results/summary.json`. The exit
code is 0 whatever the verdicts (benchmarks report, they do not fail CI) and 1 if any benchmark raised.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from bench import capacity, resume, scaleout, turns
from bench.common import (
    BASELINE_HTTP_CLIENT_ENV,
    SERVICE_HTTP_CLIENT_ENV,
    BenchFn,
    make_context,
    pin_self,
    plan_cpus,
    print_report,
    write_result,
)
from bench.report import print_table, write_summary
from general_agent_server.model.port import HTTP_CLIENTS


@dataclass(frozen=True)
class Benchmark:
    run: BenchFn
    description: str


BENCHMARKS: Final[dict[str, Benchmark]] = {
    "turn_fresh": Benchmark(turns.turn_fresh, "ttfd and text turn on a fresh session; server CPU per turn"),
    "turn_history": Benchmark(turns.turn_history, "text turns on one session growing to 200 messages"),
    "tool_round": Benchmark(turns.tool_round, "one local tool round (glob)"),
    "deltas_1000": Benchmark(turns.deltas_1000, "a 1,000-delta turn"),
    "concurrency": Benchmark(capacity.concurrency, "turns/s at 50 and 200 concurrent sessions; loop lag p99"),
    "resume": Benchmark(resume.resume, "first and second turn on a 10,000-message session after a restart"),
    "memory": Benchmark(capacity.memory, "RSS per idle loaded session (1,000) and per open watch stream"),
    "scaleout": Benchmark(
        scaleout.scaleout, "turns/s with 1/2/4 workers (SQLite) and 1/2 replicas (PostgreSQL); PostgreSQL cost per turn"
    ),
}


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    # Raised inside the event loop, this unwinds the running benchmark like Ctrl-C does, so its
    # cleanup kills the server and fake process groups and removes the temporary directories.
    raise KeyboardInterrupt(f"signal {signum}")


def _parse(argv: Sequence[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command line; the options the servers must see too are put in the environment they inherit."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of the service against the bare anthropic SDK sending the identical request, "
        "on a fast fake model. BENCH_ITERATIONS / BENCH_WARMUP override the per-benchmark counts.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="short smoke run (few iterations)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--details", action="store_true", help="print every benchmark's full report too")
    parser.add_argument(
        "--loop-iterations",
        action="store_true",
        help="concurrency: also time the server's loop iterations (their callbacks; costs the server a few percent)",
    )
    parser.add_argument(
        "--long-steps",
        type=float,
        metavar="MS",
        help="concurrency: also tally the server's loop callbacks longer than MS by where their task steps began and"
        " ended (costs the server a few microseconds per step)",
    )
    parser.add_argument(
        "--service-http-client",
        choices=HTTP_CLIENTS,
        help=f"the HTTP client under the service's SDK (default: the server's; sets {SERVICE_HTTP_CLIENT_ENV})",
    )
    parser.add_argument(
        "--baseline-http-client",
        choices=HTTP_CLIENTS,
        help="the HTTP client under the baseline's SDK (default: the SDK's own, httpx; "
        f"sets {BASELINE_HTTP_CLIENT_ENV})",
    )
    args = parser.parse_args(argv)
    # Read by bench.common.http_clients, here and in the servers' environment.
    if args.service_http_client:
        os.environ[SERVICE_HTTP_CLIENT_ENV] = args.service_http_client
    if args.baseline_http_client:
        os.environ[BASELINE_HTTP_CLIENT_ENV] = args.baseline_http_client
    if args.long_steps is not None:
        if args.long_steps <= 0:
            parser.error(f"--long-steps: expected milliseconds above 0, got {args.long_steps:g}")
        os.environ["BENCH_LONG_STEPS_MS"] = f"{args.long_steps:g}"
    if args.loop_iterations:
        os.environ["BENCH_LOOP_ITERATIONS"] = "1"  # the servers the benchmarks start inherit it
    return parser, args


def main(argv: Sequence[str] | None = None) -> int:
    parser, args = _parse(argv)
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
    # The measuring client runs here; subprocesses get their own cores (see bench.processes.spawning_on).
    pin_self(cpus.client)
    ctx = make_context(quick=args.quick, cpus=cpus)

    failed: list[str] = []
    results: list[dict[str, Any]] = []
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
        results.append(result)
        if args.details:
            print_report(result)
        write_result(result)
    print_table(results, cpus.describe(), quick=args.quick)
    path = write_summary(results, failed, quick=args.quick)
    print(f"results written to {path}")
    if failed:
        print(f"errors in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
