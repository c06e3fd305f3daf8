"""Fixtures for end-to-end tests that drive a real `general-agent serve` subprocess from other processes
(the Go and TypeScript smoke programs, grpcurl, ghz).

The fake model runs in a thread (`FakeAnthropicThread`) because the server under test is a separate
process with no access to the test's event loop. Missing toolchains fail the test with a pointer to
`make install` rather than skipping it: a skipped cross-language check is a silently missing check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropicThread
from tests.support.subprocess_server import ServerProcess, ServerProcesses

REPO = Path(__file__).resolve().parents[2]
GO_CLIENT_DIR = REPO / "clients" / "go"
TS_CLIENT_DIR = REPO / "clients" / "ts"
TSX = TS_CLIENT_DIR / "node_modules" / ".bin" / "tsx"
GRPCURL = REPO / ".bin" / "grpcurl"
GHZ = REPO / ".bin" / "ghz"

INSTALL_HINT = "run `make install` from the repository root"


def require_executable(name: str) -> str:
    """The path of `name` on PATH; fails the test (never skips) when it is missing."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not on PATH; install it and {INSTALL_HINT}", pytrace=False)
    return found


def require_file(path: Path, what: str) -> Path:
    """`path` if it is an executable file; fails the test (never skips) otherwise."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{what} not found at {path}; {INSTALL_HINT}", pytrace=False)
    return path


def describe_run(result: subprocess.CompletedProcess[str], server: ServerProcess | None = None) -> str:
    """A failure message with everything needed to debug a client run (and the server log, if any)."""
    text = (
        f"command: {result.args!r}\nexit code: {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    if server is not None:
        text += f"\n--- server log ---\n{server.log()}"
    return text


@pytest.fixture
def fake_model_thread() -> Iterator[FakeAnthropicThread]:
    """A fake Anthropic API on its own thread; replies "ok" unless a test enqueues something else."""
    fake = FakeAnthropicThread()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def server_processes(tmp_path: Path, fake_model_thread: FakeAnthropicThread) -> Iterator[ServerProcesses]:
    """Makes `general-agent serve` subprocesses (state in tmp_path) talking to the fake model, not started, so
    a test can kill and restart one on the same state directory.

    Every process group made is SIGKILLed at teardown, also when the test (or a start) failed.
    """
    processes = ServerProcesses(root=tmp_path, model_url=fake_model_thread.base_url)
    try:
        yield processes
    finally:
        processes.kill_all()


@pytest.fixture
def server_process(server_processes: ServerProcesses) -> ServerProcess:
    """A started `general-agent serve` subprocess with default settings (see `server_processes`)."""
    server = server_processes.make()
    server.start()
    return server


def build_go_command(tmp_path_factory: pytest.TempPathFactory, command: str) -> Path:
    """Builds clients/go/cmd/<command> into a temporary directory; fails the test (never skips) when Go
    or the build is missing."""
    go = require_executable("go")
    out = tmp_path_factory.mktemp(f"go-{command}") / command
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    what = f"`go build ./cmd/{command}`"
    try:
        result = subprocess.run(
            [go, "build", "-o", str(out), f"./cmd/{command}"],
            cwd=GO_CLIENT_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what} timed out after {exc.timeout}s; {INSTALL_HINT}", pytrace=False)
    if result.returncode != 0 or not out.is_file():
        pytest.fail(f"{what} failed ({INSTALL_HINT}):\n{describe_run(result)}", pytrace=False)
    return out


@pytest.fixture(scope="session")
def go_smoke_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go smoke program (clients/go/cmd/smoke), built once per test session."""
    return build_go_command(tmp_path_factory, "smoke")
