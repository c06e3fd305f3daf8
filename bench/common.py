"""Shared machinery for the benchmarks: CPU pinning, subprocess management, statistics, reporting.

How a benchmark runs: the fake Anthropic server and the service run as
separate processes, each pinned to one core, so neither steals CPU from the code being measured; the
measuring client is this process, pinned too. Service and baseline iterations are interleaved in one run
and the service is judged by ratios against the baseline; absolute numbers are only logged.

Pinning is inherited: a child process starts with the CPU mask of the thread that forked it, so a
subprocess is spawned while this thread is temporarily pinned to the child's core. Every thread the child
creates later (grpc's pollers, executors) inherits that mask; `thread_affinities` checks it afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Generic, TypeAlias, TypeVar

from bench.processes import (
    BenchError,
    ManagedProcess,
    context_switches,
    process_cpu_seconds,
    process_rss_kb,
    start_announcing,
    system_cpu_seconds,
    thread_affinities,
    without_service_settings,
)
from general_agent.v1 import content_pb2, session_messages_pb2, session_pb2, turn_pb2
from general_agent_server.model.port import HTTP_CLIENTS

REPO: Final = Path(__file__).resolve().parents[1]
RESULTS_DIR: Final = REPO / "bench" / "results"
VENV_BIN: Final = Path(sys.executable).parent

DEFAULT_ITERATIONS: Final = 300
QUICK_ITERATIONS: Final = 30
DEFAULT_WARMUP: Final = 30

Result: TypeAlias = dict[str, Any]
"""What a benchmark returns; see `print_report` for the keys it renders."""

BenchFn: TypeAlias = Callable[["BenchContext"], Coroutine[Any, Any, Result]]


# --------------------------------------------------------------------------- CPU pinning


@dataclass(frozen=True)
class CpuPlan:
    """Which core each process runs on. On a 1-core machine everything shares the core (degraded)."""

    service: int
    fake: int
    client: int
    allowed: tuple[int, ...]

    @property
    def degraded(self) -> bool:
        return self.service == self.client

    def describe(self) -> str:
        text = f"service→CPU{self.service}, fake Anthropic→CPU{self.fake}, client/baseline→CPU{self.client}"
        if self.degraded:
            text += " (DEGRADED: fewer than 2 usable cores, everything shares one)"
        return text


def plan_cpus() -> CpuPlan:
    """Service on the first usable core; fake server and measuring client on the second."""
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    service = allowed[0]
    other = allowed[1] if len(allowed) > 1 else allowed[0]
    return CpuPlan(service=service, fake=other, client=other, allowed=allowed)


def pin_self(cpu: int) -> None:
    """Pin the calling thread (and every thread or process it creates from now on) to `cpu`."""
    os.sched_setaffinity(0, {cpu})


BENCH_API_KEY: Final = "sk-ant-api03-bench-" + "0123456789abcdefghijklmnopqrstuvwxyz" * 2


SERVICE_HTTP_CLIENT_ENV: Final = "BENCH_SERVICE_HTTP_CLIENT"
BASELINE_HTTP_CLIENT_ENV: Final = "BENCH_BASELINE_HTTP_CLIENT"


def http_clients() -> tuple[str, str]:
    """The HTTP client under the SDK of the service's model calls and of the baseline's: the server's default and the
    bare SDK's own (httpx) unless `python -m bench --service-http-client / --baseline-http-client` chose others."""
    return (
        os.environ.get(SERVICE_HTTP_CLIENT_ENV, HTTP_CLIENTS[0]),
        os.environ.get(BASELINE_HTTP_CLIENT_ENV, "httpx"),
    )


def service_env(base_url: str) -> dict[str, str]:
    """This environment without any GENERAL_AGENT_*/ANTHROPIC_* setting, pointed at the fake."""
    env = without_service_settings()
    env.update({"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": BENCH_API_KEY, "PYTHONUNBUFFERED": "1"})
    if SERVICE_HTTP_CLIENT_ENV in os.environ:
        env["GENERAL_AGENT_MODEL_HTTP_CLIENT"] = os.environ[SERVICE_HTTP_CLIENT_ENV]
    return env


async def start_fake(
    stack: contextlib.AsyncExitStack,
    workdir: Path,
    cpu: int,
    *,
    deltas: int | None = None,
    text: str | None = None,
    script: str | None = None,
) -> tuple[ManagedProcess, str]:
    """The fake Anthropic server as its own process on `cpu`; returns it and its base URL.

    `script` names a request-inspecting responder of the fake's CLI (`--script`, e.g. "tool_round")."""
    argv = [sys.executable, "-m", "general_agent.testing.fake_anthropic", "--port", "0"]
    if deltas is not None:
        argv += ["--deltas", str(deltas)]
    if text is not None:
        argv += ["--text", text]
    if script is not None:
        argv += ["--script", script]
    proc, data = await start_announcing(
        stack, workdir, name="fake Anthropic server", slug="fake", argv=argv, env=without_service_settings(), cpu=cpu
    )
    return proc, str(data["base_url"])


def service_workspace(workdir: Path) -> Path:
    """The `--workspace-dir` `start_service` gives the service; a session's workspace is
    `<this>/<tenant>/<session_id>/` (tenant "default" without auth)."""
    return workdir / "workspace"


async def start_service(
    stack: contextlib.AsyncExitStack,
    workdir: Path,
    cpu: int,
    base_url: str,
    extra_args: Sequence[str] = (),
) -> tuple[ManagedProcess, str]:
    """`general-agent serve` as its own process on `cpu`; returns it and its gRPC address."""
    state = workdir / "state"
    workspace = service_workspace(workdir)
    state.mkdir()
    workspace.mkdir()
    ready = workdir / "service-ready.json"
    argv = [
        str(VENV_BIN / "general-agent"),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        str(state),
        "--workspace-dir",
        str(workspace),
        "--ready-file",
        str(ready),
        "--log-level",
        "WARNING",
        *extra_args,
    ]
    proc = ManagedProcess(
        name="general-agent serve",
        argv=argv,
        env=service_env(base_url),
        cwd=workdir,
        log_path=workdir / "service.log",
        ready_file=ready,
        cpu=cpu,
    )
    stack.callback(proc.kill)
    proc.start()
    data = await proc.wait_ready()
    return proc, str(data["address"])


def temp_workdir(stack: contextlib.AsyncExitStack, prefix: str) -> Path:
    """A temporary directory removed when `stack` closes (after the processes in it are killed,
    because callbacks registered later run first)."""
    tmp = tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True)
    stack.callback(tmp.cleanup)
    return Path(tmp.name)


# --------------------------------------------------------------------------- run context


@dataclass(frozen=True)
class BenchContext:
    iterations: int
    warmup: int
    quick: bool
    cpus: CpuPlan
    iterations_override: int | None = None
    """BENCH_ITERATIONS when set (not with --quick); `iterations` already includes it."""
    warmup_override: int | None = None
    """BENCH_WARMUP when set; `warmup` already includes it."""

    def counts(self, *, iterations: int, quick_iterations: int, warmup: int, quick_warmup: int) -> tuple[int, int]:
        """(iterations, warm-ups) for a benchmark with its own defaults, honouring --quick and the
        BENCH_ITERATIONS / BENCH_WARMUP overrides as `iterations` / `warmup` do."""
        n = quick_iterations if self.quick else (self.iterations_override or iterations)
        w = self.warmup_override or (quick_warmup if self.quick else warmup)
        return n, w


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise SystemExit(f"{name} must be ≥ 1, got {value}")
    return value


@contextlib.contextmanager
def heap_frozen() -> Iterator[int]:
    """While measuring: what this process (the measuring client) has built so far, its imports (anthropic, grpc,
    pydantic: over 170,000 objects) included, is out of the garbage collector's sight, as the server's start-up is
    (`freeze_start_up`). Otherwise a full collection of this process stops it for 80–125 ms about once per 870
    turns, inside one measured turn. Yields how many objects are frozen; unfreezes on exit."""
    gc.collect()
    gc.freeze()
    try:
        yield gc.get_freeze_count()
    finally:
        gc.unfreeze()


def make_context(*, quick: bool, cpus: CpuPlan) -> BenchContext:
    """Iterations: 30 with --quick, else BENCH_ITERATIONS, else 300. Warm-ups: BENCH_WARMUP, else 30.
    Benchmarks with other defaults get theirs from `BenchContext.counts`."""
    iterations_override = None if quick else _env_int("BENCH_ITERATIONS")
    warmup_override = _env_int("BENCH_WARMUP")
    return BenchContext(
        iterations=QUICK_ITERATIONS if quick else (iterations_override or DEFAULT_ITERATIONS),
        warmup=warmup_override or DEFAULT_WARMUP,
        quick=quick,
        cpus=cpus,
        iterations_override=iterations_override,
        warmup_override=warmup_override,
    )


# --------------------------------------------------------------------------- measured window

_T = TypeVar("_T")


async def run_timed(
    coro_fn: Callable[[], Awaitable[_T]], what: str, *procs: ManagedProcess, limit_s: float = 10.0
) -> _T:
    """One iteration under a timeout; on timeout, a dead subprocess is reported rather than the timeout."""
    try:
        async with asyncio.timeout(limit_s):
            return await coro_fn()
    except TimeoutError as exc:
        for proc in procs:
            proc.check_alive()
        raise BenchError(f"{what} iteration timed out after {limit_s}s") from exc


class MeasuredWindow:
    """CPU seconds and context switches of the service, the fake and this process, and what the rest of
    the machine used, over the measured iterations (`with MeasuredWindow(service, fake) as window:`).

    Inside it, this process's heap is frozen (`heap_frozen`), so its collector pauses stay out of the window."""

    def __init__(self, service: ManagedProcess, fake: ManagedProcess) -> None:
        self.service = service
        self.fake = fake
        self.wall = self.self_cpu = self.service_cpu = self.fake_cpu = 0.0
        self.others_cpu = self.steal_cpu = 0.0
        self.service_switches = self.fake_switches = self.self_switches = 0
        self._start: tuple[float, ...] = ()
        self._switches: tuple[int, ...] = ()
        self._frozen = contextlib.ExitStack()

    def __enter__(self) -> MeasuredWindow:
        self._frozen.enter_context(heap_frozen())
        self._switches = (
            context_switches(self.service.pid),
            context_switches(self.fake.pid),
            context_switches(os.getpid()),
        )
        system, steal = system_cpu_seconds()
        self._start = (
            process_cpu_seconds(self.service.pid),
            process_cpu_seconds(self.fake.pid),
            time.process_time(),
            system,
            steal,
            time.perf_counter(),
        )
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        wall = time.perf_counter()
        system, steal = system_cpu_seconds()
        self_cpu = time.process_time()
        service_cpu = process_cpu_seconds(self.service.pid)
        fake_cpu = process_cpu_seconds(self.fake.pid)
        service0, fake0, self0, system0, steal0, wall0 = self._start
        self.wall = wall - wall0
        self.self_cpu = self_cpu - self0
        self.service_cpu = service_cpu - service0
        self.fake_cpu = fake_cpu - fake0
        self.steal_cpu = steal - steal0
        self.others_cpu = max(0.0, (system - system0) - self.self_cpu - self.service_cpu - self.fake_cpu)
        self.service_switches = context_switches(self.service.pid) - self._switches[0]
        self.fake_switches = context_switches(self.fake.pid) - self._switches[1]
        self.self_switches = context_switches(os.getpid()) - self._switches[2]
        self._frozen.close()

    @property
    def others_pct(self) -> float:
        return 100 * self.others_cpu / self.wall if self.wall else 0.0

    def figures(self, n: int) -> dict[str, float]:
        """The `cpu` block of a result over `n` measured pairs (one baseline + one service iteration)."""
        return {
            "service CPU per service iteration, ms (CreateSession + turn)": round(self.service_cpu * 1000 / n, 3),
            "fake CPU per pair, ms": round(self.fake_cpu * 1000 / n, 3),
            "bench process CPU per pair, ms (client + baseline)": round(self.self_cpu * 1000 / n, 3),
            "bench process CPU %": round(100 * self.self_cpu / self.wall, 1),
            "service CPU %": round(100 * self.service_cpu / self.wall, 1),
            "fake CPU %": round(100 * self.fake_cpu / self.wall, 1),
            "service context switches per service iteration": round(self.service_switches / n, 1),
            "fake context switches per pair": round(self.fake_switches / n, 1),
            "bench process context switches per pair": round(self.self_switches / n, 1),
            "other processes CPU % (machine noise)": round(self.others_pct, 1),
            "steal CPU %": round(100 * self.steal_cpu / self.wall, 1),
        }

    def notes(self, cpus: CpuPlan) -> list[str]:
        if self.others_pct <= 10:
            return []
        return [
            f"other processes used {self.others_pct:.0f}% of a core during the measurement (of "
            f"{100 * len(cpus.allowed)}%): absolute figures include CPU queueing and the ratio "
            "penalises the path with more wake-ups; rerun on a quiet machine"
        ]


# --------------------------------------------------------------------------- statistics


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) by linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    """Summary in milliseconds of nanosecond samples."""
    ms = sorted(s / 1e6 for s in samples_ns)
    return {
        "n": float(len(ms)),
        "mean_ms": statistics.fmean(ms) if ms else math.nan,
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "min_ms": ms[0] if ms else math.nan,
        "max_ms": ms[-1] if ms else math.nan,
        "stdev_ms": statistics.stdev(ms) if len(ms) > 1 else 0.0,
    }


# --------------------------------------------------------------------------- environment


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def loadavg() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "n/a"


def environment(cpus: CpuPlan) -> dict[str, Any]:
    """The machine and software configuration printed with every figure."""
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": list(cpus.allowed),
        "cpu_model": _cpu_model(),
        "pinning": cpus.describe(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "grpcio": _version("grpcio"),
        "protobuf": _version("protobuf"),
        "anthropic": _version("anthropic"),
        "httpx2": _version("httpx2"),
        "aiohttp": _version("aiohttp"),
        "model HTTP client (service / baseline)": " / ".join(http_clients()),
        "general-agent-server": _version("general-agent-server"),
        "event loop": "asyncio (default)",
    }


# --------------------------------------------------------------------------- reporting


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list | tuple):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def _print_mapping(title: str, mapping: Mapping[str, Any]) -> None:
    if not mapping:
        return
    print(f"{title}:")
    width = max(len(k) for k in mapping)
    for key, value in mapping.items():
        print(f"  {key:<{width}}  {_fmt(value)}")


def print_report(result: Result) -> None:
    """Render the keys every benchmark result shares.

    `title`; `environment` and `configuration` (key → value); `latency_ms` (row label → the dict of
    `latency_stats`); `comparison` and `cpu` (key → number or text); `target` ({rule, pass, detail}).
    """
    bar = "=" * 96
    print(bar)
    print(f"{result['benchmark']}: {result.get('title', '')}")
    print(bar)
    _print_mapping("Environment", result.get("environment", {}))
    _print_mapping("Configuration", result.get("configuration", {}))
    rows: Mapping[str, Mapping[str, float]] = result.get("latency_ms", {})
    if rows:
        cols = ("n", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "stdev_ms")
        heads = ("n", "mean", "p50", "p90", "p99", "min", "max", "stdev")
        width = max(len(label) for label in rows)
        print("Latency (ms):")
        print(f"  {'':<{width}}  " + "  ".join(f"{h:>8}" for h in heads))
        for label, stats in rows.items():
            cells = [f"{int(stats['n']):>8d}"] + [f"{stats[c]:>8.3f}" for c in cols[1:]]
            print(f"  {label:<{width}}  " + "  ".join(cells))
    _print_mapping("Comparison", result.get("comparison", {}))
    _print_mapping("CPU", result.get("cpu", {}))
    target = result.get("target")
    if target:
        verdict = "PASS" if target["pass"] else "FAIL"
        print(f"Target: {target['rule']}")
        print(f"  → {verdict}: {target.get('detail', '')}")
    for note in result.get("notes", []):
        print(f"Note: {note}")
    print(bar)


def write_result(result: Result) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{result['benchmark']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def service_tool_definitions() -> list[Any]:
    """The tool definitions the service sends a GENERAL session's model (its built-ins), taken from the
    server's own catalog so a baseline request is the same size as the service's."""
    from general_agent_server.config import ServerSettings
    from general_agent_server.tools.catalog import builtin_catalog

    return builtin_catalog(ServerSettings()).for_session(coding=False, allowed=()).definitions()


_B = TypeVar("_B")
_S = TypeVar("_S")


@dataclass
class PairedSamples(Generic[_B, _S]):
    """What `measure_pairs` collected: the measured samples, this process's CPU per baseline iteration, the
    window figures, and the processes' thread affinities and service RSS at the end."""

    base: list[_B]
    service: list[_S]
    base_cpu: list[float]
    window: MeasuredWindow
    affinity: dict[str, list[str]]
    service_rss_kb: int


async def measure_pairs(
    baseline_once: Callable[[], Awaitable[_B]],
    service_once: Callable[[], Awaitable[_S]],
    *,
    fake: ManagedProcess,
    service: ManagedProcess,
    iterations: int,
    warmup: int,
    limit_s: float,
) -> PairedSamples[_B, _S]:
    """Interleaved baseline/service iterations (ABAB, so machine noise hits both), warm-up discarded, the
    measured ones inside a MeasuredWindow."""
    base: list[_B] = []
    svc: list[_S] = []
    base_cpu: list[float] = []

    async def one_pair() -> None:
        cpu0 = time.process_time()
        base.append(await run_timed(baseline_once, "baseline", fake, limit_s=limit_s))
        base_cpu.append(time.process_time() - cpu0)
        svc.append(await run_timed(service_once, "service", fake, service, limit_s=limit_s))

    for _ in range(warmup):
        await one_pair()
    base.clear()
    svc.clear()
    base_cpu.clear()
    with MeasuredWindow(service, fake) as window:
        for _ in range(iterations):
            await one_pair()
    service.check_alive()
    fake.check_alive()
    affinity = {
        "service threads": thread_affinities(service.pid),
        "fake threads": thread_affinities(fake.pid),
        "client threads": thread_affinities(os.getpid()),
    }
    return PairedSamples(
        base=base,
        service=svc,
        base_cpu=base_cpu,
        window=window,
        affinity=affinity,
        service_rss_kb=process_rss_kb(service.pid),
    )


async def new_session(stub: Any, model_ref: str) -> tuple[str, int]:
    """A fresh session for one service iteration: its id and the CreateSession time (ns, not timed)."""
    c0 = time.perf_counter_ns()
    created = await stub.CreateSession(
        session_messages_pb2.CreateSessionRequest(session=session_pb2.Session(model_ref=model_ref))
    )
    return str(created.session.identity.session_id), time.perf_counter_ns() - c0


def stream_turn(stub: Any, session_id: str, prompt: str) -> Any:
    """The StreamTurn call of a one-text-part turn."""
    return stub.StreamTurn(
        turn_pb2.StreamTurnRequest(
            session_id=session_id,
            input=[content_pb2.ContentPart(text=content_pb2.TextPart(text=prompt))],
        )
    )
