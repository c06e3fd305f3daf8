"""`general-agent serve` as a real subprocess in its own process group, for restart and
other-language tests. The fixture waits for the ready file (written once health is SERVING) and kills
the whole group at the end, so nothing leaks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DEFAULT_API_KEY = "sk-ant-test-key-0000"


@dataclass
class ServerProcess:
    state_dir: Path
    env: dict[str, str]
    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    # Runs the server through another program (e.g. setpriv, to start it as another user).
    prefix: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    address: str = ""

    def start(self, timeout: float = 30.0) -> str:
        ready = self.state_dir / f"ready-{time.monotonic_ns()}.json"
        command = [
            *self.prefix,
            str(VENV_BIN / "general-agent"),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(self.state_dir),
            "--ready-file",
            str(ready),
            *self.extra_args,
        ]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.state_dir,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            if ready.exists():
                self.address = str(json.loads(ready.read_text())["address"])
                return self.address
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash, as far as the server can tell)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        assert self.process is not None
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/<pid>/status")


def server_env(
    base_url: str, *, api_key: str = DEFAULT_API_KEY, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENERAL_AGENT_", "ANTHROPIC_"))}
    env.update({"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": api_key, "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


@dataclass
class ServerProcesses:
    """Makes `general-agent serve` subprocesses that talk to the model at `model_url`, each with its own state
    directory and log under `root` (the first `state/` and `server.log`, then `state-1/`, `server-1.log` ...).
    `kill_all` SIGKILLs every one made; the e2e fixture calls it at teardown, also when the test failed."""

    root: Path
    model_url: str
    made: list[ServerProcess] = field(default_factory=list)

    def make(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        extra: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        prefix: Sequence[str] = (),
    ) -> ServerProcess:
        """A server not started yet: the test starts it, and may kill and start it again on the same state."""
        suffix = f"-{len(self.made)}" if self.made else ""
        state_dir = self.root / f"state{suffix}"
        state_dir.mkdir()
        server = ServerProcess(
            state_dir=state_dir,
            env=server_env(self.model_url, api_key=api_key, extra=extra),
            log_path=self.root / f"server{suffix}.log",
            extra_args=list(extra_args),
            prefix=list(prefix),
        )
        self.made.append(server)
        return server

    def kill_all(self) -> None:
        for server in self.made:
            server.kill()
