"""`general-agent serve --workers N`: N server processes on one listening port (SO_REUSEPORT: the kernel spreads
connections over them) and one store, each a replica of its own (`replica_id`-1 … -N, the same id across its
restarts so it repairs its own interrupted runs at once). This supervisor starts them, restarts one that dies
after it was serving (one that dies before is a failed start: serve stops them all and exits with its code),
writes the ready file once every worker is serving, and passes SIGTERM/SIGINT on (docs/deployment.md)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from general_agent_server.app import write_ready_file
from general_agent_server.config import ServerSettings

logger = logging.getLogger(__name__)

# A worker that dies again within this many seconds of its start is restarted after a pause, not at once.
RESTART_PAUSE_SECONDS = 1.0


def _concrete(listen: str) -> str:
    """HOST:PORT with port 0 replaced by a free port (every worker must bind the same one)."""
    host, _, port = listen.rpartition(":")
    if port != "0":
        return listen
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.bind((host.strip("[]"), 0))
        return f"{host}:{probe.getsockname()[1]}"


class Workers:
    def __init__(self, settings: ServerSettings, argv: list[str]) -> None:
        self._settings = settings
        self._argv = argv
        self._listen = _concrete(settings.listen)
        ready = settings.ready_file or str(Path(settings.state_dir) / f"workers-{os.getpid()}.json")
        self._ready = [Path(f"{ready}.worker-{i}") for i in range(1, settings.workers + 1)]
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * settings.workers
        self._started = [0.0] * settings.workers
        self._stopping = False

    def _spawn(self, index: int) -> None:
        self._ready[index].unlink(missing_ok=True)
        command = [
            sys.executable,
            "-m",
            "general_agent_server",
            "serve",
            *self._argv,
            "--workers",
            "1",
            "--reuse-port",
            "--listen",
            self._listen,
            "--replica-id",
            f"{self._settings.replica_id}-{index + 1}",
            "--ready-file",
            str(self._ready[index]),
        ]
        self._processes[index] = subprocess.Popen(command)  # same process group: a group kill takes them all
        self._started[index] = time.monotonic()

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
        for process in self._processes:
            if process is not None and process.poll() is None:
                process.send_signal(signum)

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._stop)
        for index in range(len(self._processes)):
            self._spawn(index)
        announced = False
        while True:
            if self._stopping:
                codes = [p.wait() for p in self._processes if p is not None]
                return max(codes, default=0)
            for index, process in enumerate(self._processes):
                if process is not None and process.poll() is not None and not self._stopping:
                    if not self._ready[index].exists():
                        return self._give_up(index, process.returncode)
                    logger.warning(
                        "worker %d exited with %s; restarting it",
                        index + 1,
                        process.returncode,
                        extra={"category": "system"},
                    )
                    if time.monotonic() - self._started[index] < RESTART_PAUSE_SECONDS:
                        time.sleep(RESTART_PAUSE_SECONDS)
                    self._spawn(index)
            if not announced and all(r.exists() for r in self._ready) and self._settings.ready_file:
                write_ready_file(self._settings.ready_file, self._listen)
                announced = True
            time.sleep(0.1)

    def _give_up(self, index: int, code: int) -> int:
        """A worker that exits before it serves failed to start (the port is taken, a setting or the store is
        wrong): restarting it would fail the same way forever, so every worker is stopped and serve exits with
        its code. The worker has printed why."""
        logger.error(
            "worker %d exited with %s before it was serving; stopping the others",
            index + 1,
            code,
            extra={"category": "system"},
        )
        self._stop(signal.SIGTERM, None)
        for process in self._processes:
            if process is not None:
                process.wait()
        return code if code > 0 else 1


def strip_workers(argv: list[str]) -> list[str]:
    """The serve arguments without `--workers` (each worker gets `--workers 1`)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return out
