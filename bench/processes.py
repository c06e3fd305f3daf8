"""The benchmarks' processes: each subprocess pinned to its cores, ended with the benchmark however it dies, and
read from /proc (CPU, context switches, RSS, thread affinities). bench/common.py builds the measurements on them."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

READY_TIMEOUT: Final = 30.0


class BenchError(RuntimeError):
    """A benchmark could not run (a process died, a reply was wrong); the run exits non-zero."""


@contextlib.contextmanager
def spawning_on(cpu: int | tuple[int, ...]) -> Iterator[None]:
    """Temporarily pin this thread to `cpu` (or to a set of cores) so a child spawned inside inherits that mask."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu} if isinstance(cpu, int) else set(cpu))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _terminated_with_parent() -> None:
    """In the forked child before exec: SIGTERM when the benchmark's process dies, however it dies (a `timeout`,
    a SIGKILL), since cleanup callbacks run only on an orderly exit. Linux only (prctl PR_SET_PDEATHSIG); one
    syscall through a libc handle opened before the fork, nothing that takes a lock."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


_PR_SET_PDEATHSIG: Final = 1
_LIBC: Final = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def thread_affinities(pid: int) -> list[str]:
    """The distinct `Cpus_allowed_list` values over every thread of `pid` (one entry if all agree)."""
    seen: set[str] = set()
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("Cpus_allowed_list:"):
                        seen.add(line.split(":", 1)[1].strip())
    return sorted(seen)


_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # After "pid (comm) ", field 3 (state) is index 0; utime/stime are fields 14/15.
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (a `--workers` supervisor's workers, a postmaster's backends)."""
    found = [pid]
    for parent in found:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{parent}/task").iterdir():
                with contextlib.suppress(OSError):
                    found += [int(child) for child in (task / "children").read_text().split()]
    return found


def tree_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds of `pid` and of each live descendant (a process that exits meanwhile is left out)."""
    cpu: dict[int, float] = {}
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            cpu[member] = process_cpu_seconds(member)
    return cpu


def system_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds summed over all cores since boot, from the `cpu` line of /proc/stat.

    Busy minus the CPU of the benchmark's own processes is what other processes used: a run where that
    is large measured the scheduler's queueing as much as the code (this machine is shared)."""
    with Path("/proc/stat").open() as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK, steal / _CLK_TCK


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches summed over the live threads of `pid`: every handoff
    to another thread (aiosqlite, to_thread, grpc pollers) or wait on a socket is at least one."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        total += int(line.split(":", 1)[1])
    return total


def process_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass
class ManagedProcess:
    """A subprocess in its own process group, pinned to one core (or a set), that announces readiness in a file.

    `kill` takes down the whole group; it is safe to call more than once and is registered as a
    cleanup callback right after the start, so nothing leaks when the benchmark fails.
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    ready_file: Path
    cpu: int | tuple[int, ...]
    process: subprocess.Popen[bytes] | None = None
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError(f"{self.name} was not started")
        return self.process.pid

    def start(self) -> None:
        with self.log_path.open("ab") as log, spawning_on(self.cpu):
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_terminated_with_parent,
            )

    async def wait_ready(self, limit_s: float = READY_TIMEOUT) -> dict[str, Any]:
        """Poll for the ready file (written atomically by both the fake and the service)."""
        try:
            async with asyncio.timeout(limit_s):
                while True:
                    if self.process is not None and self.process.poll() is not None:
                        raise BenchError(
                            f"{self.name} exited with {self.process.returncode} before it was ready:\n{self.log_tail()}"
                        )
                    if self.ready_file.exists():
                        with contextlib.suppress(ValueError):
                            data = json.loads(self.ready_file.read_text())
                            if isinstance(data, dict):
                                self.ready = data
                                return data
                    await asyncio.sleep(0.02)
        except TimeoutError as exc:
            raise BenchError(f"{self.name} not ready after {limit_s}s:\n{self.log_tail()}") from exc

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise BenchError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self, grace: float = 5.0) -> None:
        """SIGTERM the group, wait up to `grace` seconds, then SIGKILL whatever is left of the group."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def without_service_settings() -> dict[str, str]:
    """This process's environment without any GENERAL_AGENT_*/ANTHROPIC_* setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("GENERAL_AGENT_", "ANTHROPIC_"))}


async def start_announcing(
    stack: contextlib.AsyncExitStack,
    workdir: Path,
    *,
    name: str,
    slug: str,
    argv: list[str],
    env: dict[str, str],
    cpu: int | tuple[int, ...],
) -> tuple[ManagedProcess, dict[str, Any]]:
    """`argv --ready-file WORKDIR/SLUG-ready.json` on `cpu`, logging to WORKDIR/SLUG.log and killed by `stack`;
    returns it once ready, with what its ready file says."""
    ready = workdir / f"{slug}-ready.json"
    proc = ManagedProcess(
        name=name,
        argv=[*argv, "--ready-file", str(ready)],
        env=env,
        cwd=workdir,
        log_path=workdir / f"{slug}.log",
        ready_file=ready,
        cpu=cpu,
    )
    stack.callback(proc.kill)
    proc.start()
    return proc, await proc.wait_ready()


def terminate_together(processes: Sequence[ManagedProcess], grace: float = 5.0) -> None:
    """`kill` for several processes with one shared grace period: SIGTERM to every group first, so their
    graceful shutdowns overlap instead of adding up."""
    for proc in processes:
        if proc.process is not None and proc.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in processes:
        if proc.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        proc.kill(grace=0.0)


# As long as a real key: the server registers its key with the redactor, which then scrubs every event, commit and
# export, and that cost belongs in the figures (a key shorter than the redactor's minimum is not registered).
