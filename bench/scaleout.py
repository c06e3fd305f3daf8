"""`scaleout`: beyond one server process (docs/deployment.md), side by side in one run.

- Worker processes on one host: closed-loop text turns/s from 50 concurrent sessions against
  `general-agent serve --workers N` on SQLite, N = 1, 2, 4 (one listen port shared with SO_REUSEPORT).
- Replicas on PostgreSQL: the same from 1 and 2 `serve --store postgresql://...` processes on one database
  (a throwaway cluster, tests/support/pg_cluster.py), the sessions spread over the replicas.
- Cost per turn, PostgreSQL against SQLite with one server each: p50 text-turn latency and the server's CPU
  per turn (and the server's plus PostgreSQL's), turns alternating between the two.

The baseline of a scale row is the 1-worker (1-replica) figure of the same run, and the levels alternate
round by round so machine noise hits them alike. SO_REUSEPORT spreads TCP connections, not calls: the kernel
picks a worker per connection by a hash of its addresses, and gRPC keeps one connection per channel, so the
client opens CHANNELS channels, each with its own subchannel pool (`grpc.use_local_subchannel_pool`; channels
with equal arguments otherwise share one connection), and runs each session on one of them. How evenly the
connections landed shows in the per-process CPU figures. Every server process may run on every core; the fake
and this client share the second core, so past the machine's core count the figures are bounded by the cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.capacity import closed_loop
from bench.common import BenchContext, MeasuredWindow, Result, environment, loadavg, temp_workdir
from bench.harness import ServiceClient, p50_ms, row, start_bench_service, start_fast_fake
from bench.processes import ManagedProcess, terminate_together, tree_cpu_seconds
from tests.support.pg_cluster import Cluster, throwaway_cluster

SESSIONS: Final = 50
CHANNELS: Final = 16  # over 4 workers: a worker gets no connection with probability ~4% (8: ~40%)
WORKERS: Final = (1, 2, 4)
REPLICAS: Final = (1, 2)
COST_SESSIONS: Final = 10  # the cost phase's turns rotate over these, so histories stay short
# Seven worker processes and two replicas start at once, each importing the SDK and grpc: far more than the
# other benchmarks' one server, on a shared 2-core machine.
READY_TIMEOUT: Final = 180.0


@dataclass
class Setup:
    """One configuration under load: its server processes, CHANNELS clients over their addresses, and the
    sessions, each created and turned through one client."""

    label: str
    processes: list[ManagedProcess]
    clients: list[ServiceClient]
    database: Cluster | None = None
    sessions: list[tuple[ServiceClient, str]] = field(default_factory=list)
    failure: str = ""

    async def create(self, count: int) -> None:
        for i in range(count):
            client = self.clients[i % len(self.clients)]
            self.sessions.append((client, await client.create()))

    async def turn(self, i: int) -> None:
        client, session_id = self.sessions[i]
        try:
            await client.turn(session_id)
        except Exception as exc:  # closed_loop counts it; the first one is kept for the report
            self.failure = self.failure or f"{type(exc).__name__}: {exc}"[:300]
            raise

    def server_cpu(self) -> dict[int, float]:
        """CPU seconds by server process (a `--workers` supervisor and each of its workers)."""
        cpu: dict[int, float] = {}
        for process in self.processes:
            cpu.update(tree_cpu_seconds(process.pid))
        return cpu

    def database_cpu(self) -> float:
        return sum(tree_cpu_seconds(self.database.postmaster_pid()).values()) if self.database else 0.0


def _clients(stack: contextlib.AsyncExitStack, addresses: Sequence[str]) -> list[ServiceClient]:
    clients = []
    for j in range(CHANNELS):
        client = ServiceClient(addresses[j % len(addresses)], options=[("grpc.use_local_subchannel_pool", 1)])
        stack.push_async_callback(client.close)
        clients.append(client)
    return clients


async def _start(
    stack: contextlib.AsyncExitStack, ctx: BenchContext, workdir: Path, base_url: str, args: tuple[str, ...]
) -> tuple[ManagedProcess, str]:
    workdir.mkdir()  # noqa: ASYNC240 (a local directory, before the server exists)
    return await start_bench_service(
        stack, workdir, ctx.cpus.allowed, base_url, extra_args=args, ready_timeout=READY_TIMEOUT
    )


async def _setups(
    stack: contextlib.AsyncExitStack, ctx: BenchContext, root: Path, base_url: str, cluster: Cluster
) -> tuple[list[Setup], list[Setup]]:
    """Every server started at once (start-up is mostly imports, so they overlap on the cores): a `--workers N`
    server per N, and PostgreSQL replicas of which replica r serves in every level of at least r replicas."""
    starts: list[tuple[str, tuple[str, ...]]] = [(f"sqlite-{n}", ("--workers", str(n))) for n in WORKERS]
    starts += [
        (f"postgres-{r}", ("--store", cluster.url, "--replica-id", f"pg-{r}")) for r in range(1, max(REPLICAS) + 1)
    ]
    started = await asyncio.gather(*(_start(stack, ctx, root / name, base_url, args) for name, args in starts))
    sqlite = [
        Setup(f"SQLite, {n} worker{'s' * (n > 1)}", [process], _clients(stack, [address]))
        for n, (process, address) in zip(WORKERS, started, strict=False)
    ]
    replicas = started[len(WORKERS) :]
    postgres = [
        Setup(
            f"PostgreSQL, {n} replica{'s' * (n > 1)}",
            [process for process, _ in replicas[:n]],
            _clients(stack, [address for _, address in replicas[:n]]),
            database=cluster,
        )
        for n in REPLICAS
    ]
    return sqlite, postgres


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def _scale(setups: list[Setup], seconds: float, rounds: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Median turns/s of every setup over `rounds` alternating phases, and the CPU and error figures."""
    rates: dict[str, list[float]] = {s.label: [] for s in setups}
    figures: dict[str, Any] = {}
    for setup in setups:
        await setup.create(SESSIONS)
        await closed_loop(SESSIONS, 0.3, setup.turn)  # warm-up: every connection open, every session loaded
    for _ in range(rounds):
        for setup in setups:
            cpu0, db0, t0 = setup.server_cpu(), setup.database_cpu(), time.perf_counter()
            rate, errors = await closed_loop(SESSIONS, seconds, setup.turn)
            cpu1, db1, wall = setup.server_cpu(), setup.database_cpu(), time.perf_counter() - t0
            rates[setup.label].append(rate)
            used = [100 * (cpu1[pid] - cpu0[pid]) / wall for pid in cpu1 if pid in cpu0]
            figures[f"{setup.label}: server CPU % by process"] = " / ".join(f"{u:.0f}" for u in used)
            if setup.database is not None:
                figures[f"{setup.label}: PostgreSQL CPU %"] = round(100 * (db1 - db0) / wall, 1)
            key = f"{setup.label}: errors"
            figures[key] = figures.get(key, 0) + errors
            if setup.failure:
                figures[f"{setup.label}: first error"] = setup.failure
    return {label: _median(values) for label, values in rates.items()}, figures


def _scale_rows(rates: dict[str, float], figures: dict[str, Any]) -> list[dict[str, Any]]:
    sqlite1, postgres1 = "SQLite, 1 worker", "PostgreSQL, 1 replica"
    pairs = [(f"SQLite, {n} workers", sqlite1) for n in WORKERS[1:]]
    pairs += [(f"PostgreSQL, {n} replicas", postgres1) for n in REPLICAS[1:]]
    pairs.append((postgres1, sqlite1))
    rows = []
    for label, baseline in pairs:
        measure = f"{SESSIONS} sessions turns/s, {label} (baseline: {baseline})"
        r = row(measure, rates[label], rates[baseline], unit="turns/s")
        errors = figures[f"{label}: errors"], figures[f"{baseline}: errors"]
        r["errors (service, baseline)"] = errors
        if any(errors):
            r["pass"] = False
        rows.append(r)
    return rows


async def _cost(
    sqlite: Setup, postgres: Setup, fake: ManagedProcess, iterations: int, warmup: int
) -> tuple[list[dict[str, Any]], dict[str, Any], MeasuredWindow]:
    """Sequential text turns alternating between one SQLite and one PostgreSQL server (fresh sessions, so
    histories stay short): p50 latency and CPU per turn of each."""
    both = (sqlite, postgres)
    sessions = {s.label: [(s.clients[0], await s.clients[0].create()) for _ in range(COST_SESSIONS)] for s in both}

    async def alternate(count: int) -> dict[str, list[int]]:
        totals: dict[str, list[int]] = {s.label: [] for s in both}
        for i in range(count):
            for setup in both:
                client, session_id = sessions[setup.label][i % COST_SESSIONS]
                totals[setup.label].append((await client.turn(session_id)).total)
        return totals

    await alternate(warmup)
    cpu0 = {s.label: sum(s.server_cpu().values()) for s in both}
    db0 = postgres.database_cpu()
    with MeasuredWindow(sqlite.processes[0], fake) as window:
        totals = await alternate(iterations)
    cpu = {s.label: 1000 * (sum(s.server_cpu().values()) - cpu0[s.label]) / iterations for s in both}
    db = 1000 * (postgres.database_cpu() - db0) / iterations
    p50 = {label: p50_ms(values) for label, values in totals.items()}
    pg, sq = postgres.label, sqlite.label
    rows = [
        row("text turn, PostgreSQL (baseline: SQLite), one server", p50[pg], p50[sq]),
        row("server CPU per text turn, PostgreSQL (baseline: SQLite)", cpu[pg], cpu[sq]),
        row("server + database CPU per text turn, PostgreSQL (baseline: SQLite)", cpu[pg] + db, cpu[sq]),
    ]
    figures = {"PostgreSQL CPU per text turn, ms": round(db, 3), "cost phase turns per server": iterations}
    return rows, figures, window


async def scaleout(ctx: BenchContext) -> Result:
    seconds, rounds = (1.0, 1) if ctx.quick else (4.0, 3)
    iterations, warmup = ctx.counts(iterations=200, quick_iterations=20, warmup=20, quick_warmup=5)
    async with contextlib.AsyncExitStack() as stack:
        root = temp_workdir(stack, "bench-scaleout-")
        cluster = stack.enter_context(throwaway_cluster())
        fake, base_url = await start_fast_fake(stack, root, ctx.cpus.fake)
        sqlite, postgres = await _setups(stack, ctx, root, base_url, cluster)
        servers = {p.pid: p for setup in [*sqlite, *postgres] for p in setup.processes}
        stack.callback(terminate_together, list(servers.values()))
        cost_rows, figures, window = await _cost(sqlite[0], postgres[0], fake, iterations, warmup)
        rates, scale_figures = await _scale([*sqlite, *postgres], seconds, rounds)
        for setup in [*sqlite, *postgres]:
            for process in setup.processes:
                process.check_alive()
    figures.update(scale_figures)
    figures.update({f"{label}: turns/s": round(rate, 1) for label, rate in rates.items()})
    return {
        "benchmark": "scaleout",
        "title": "turns/s with worker processes (SQLite) and replicas (PostgreSQL); PostgreSQL vs SQLite per turn",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": environment(ctx.cpus),
        "configuration": {
            "sessions": SESSIONS,
            "client channels": CHANNELS,
            "phase": f"{seconds}s × {rounds} rounds, levels alternating",
            "server processes": "unpinned (any core); fake and client on the second core",
            "loadavg at end": loadavg(),
        },
        "rows": [*_scale_rows(rates, figures), *cost_rows],
        "cpu": figures,
        "notes": [
            f"{len(ctx.cpus.allowed)} usable cores shared by the servers, the fake and this client: turns/s past "
            f"{len(ctx.cpus.allowed)} workers is bounded by the cores",
            *window.notes(ctx.cpus),
        ],
    }
