"""The real server for a host's own tests: ``general-agent serve`` as a subprocess on a free loopback port, its
model the scripted fake Anthropic API (:class:`~general_agent.testing.FakeAnthropicThread`), its state in a
temporary directory. Needs the ``general-agent-server`` distribution installed beside this one.

Example (pytest; also usable as a plain ``with`` block)::

    from general_agent import AgentClient
    from general_agent.testing import TextReply
    from general_agent.testing.server import agent_server

    async def test_my_host() -> None:
        with agent_server() as server:
            server.model.enqueue(TextReply("hi"))
            async with await AgentClient.connect(server.address) as client:
                sid = (await client.create_session()).identity.session_id
                assert (await client.run(sid, "hello")).text == "hi"

``pytest_plugins = ["general_agent.testing.pytest_plugin"]`` gives the same as an ``agent_server`` fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from general_agent.testing.fake_anthropic import FakeAnthropicThread

__all__ = ["LocalServer", "agent_server"]

_DUMMY_KEY = "sk-ant-test-0000000000"


@dataclass
class LocalServer:
    """A started server: its ``address``, the fake ``model`` to script, its state directory and log."""

    address: str
    model: FakeAnthropicThread
    state_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _start(
    state_dir: Path, log_path: Path, env: dict[str, str], args: list[str], timeout: float
) -> tuple[subprocess.Popen[bytes], str]:
    ready = state_dir / "ready.json"
    command = [sys.executable, "-m", "general_agent_server", "serve", "--listen", "127.0.0.1:0"]
    command += ["--state-dir", str(state_dir), "--ready-file", str(ready), *args]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=state_dir
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log_path.read_text(errors='replace')}")
        if ready.exists():
            with contextlib.suppress(ValueError):  # the file may be half written
                return process, str(json.loads(ready.read_text())["address"])
        time.sleep(0.02)
    _kill(process)
    raise RuntimeError(f"the server was not ready after {timeout:g} s:\n{log_path.read_text(errors='replace')}")


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@contextlib.contextmanager
def agent_server(
    *,
    env: Mapping[str, str] | None = None,
    args: tuple[str, ...] = (),
    state_dir: Path | None = None,
    timeout: float = 30.0,
) -> Iterator[LocalServer]:
    """Starts the fake model and the server, yields them, and kills the server's whole process group at the
    end. ``env`` adds ``GENERAL_AGENT_*`` settings; ``args`` adds ``serve`` flags."""
    model = FakeAnthropicThread()
    model.start()
    with contextlib.ExitStack() as stack:
        stack.callback(model.stop)
        if state_dir is None:
            state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="general-agent-test-")))
        state_dir.mkdir(parents=True, exist_ok=True)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("GENERAL_AGENT_", "ANTHROPIC_"))}
        environ |= {"ANTHROPIC_BASE_URL": model.base_url, "ANTHROPIC_API_KEY": _DUMMY_KEY, **(env or {})}
        environ.setdefault("GENERAL_AGENT_MODEL_MAX_RETRIES", "0")
        log_path = state_dir / "server.log"
        process, address = _start(state_dir, log_path, environ, list(args), timeout)
        stack.callback(_kill, process)
        yield LocalServer(address=address, model=model, state_dir=state_dir, log_path=log_path, process=process)
