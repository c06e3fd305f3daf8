"""The generated Go and TypeScript clients against a live `general-agent serve` subprocess.

Each test runs the client's smoke program (create a session, stream one turn), checks what it printed
and checks that the user's prompt reached the model unchanged.
"""

from __future__ import annotations

import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropicThread, TextReply
from tests.e2e.conftest import TS_CLIENT_DIR, TSX, describe_run, require_executable, require_file
from tests.support.subprocess_server import ServerProcess

CLIENT_TIMEOUT = 60.0  # tsx alone needs ~1-2 s to start

SESSION_LINE = re.compile(r"^session (\S+)$", re.MULTILINE)


def run_client(command: list[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, encoding="utf-8", timeout=CLIENT_TIMEOUT, check=False
    )


def assert_smoke_output(result: subprocess.CompletedProcess[str], server: ServerProcess, expected_text: str) -> None:
    """Exit 0 and exactly the three lines the smoke programs print, in order."""
    details = describe_run(result, server)
    assert result.returncode == 0, details
    lines = result.stdout.splitlines()
    assert len(lines) == 3, details
    match = SESSION_LINE.fullmatch(lines[0])
    assert match is not None, details
    session_id = match.group(1)
    assert str(uuid.UUID(session_id)) == session_id, details  # a canonical (lower-case, hyphenated) UUID
    assert lines[1] == f"text: {expected_text}", details
    assert lines[2] == "outcome: RUN_OUTCOME_COMPLETED", details


def assert_model_saw(fake: FakeAnthropicThread, prompt: str) -> None:
    """One model call was made for the turn, it carried the prompt, and it consumed the scripted reply."""
    requests = fake.wait_for_requests(1, timeout=5.0)
    assert len(requests) == 1, [r.body for r in requests]
    assert requests[0].last_user_text == prompt
    assert fake.pending_replies == 0


def distinctive_reply(language: str) -> tuple[str, TextReply]:
    """A reply text that cannot be mistaken for the default "ok", streamed as several uneven deltas
    (including non-ASCII, so UTF-8 handling end to end is covered)."""
    chunks = [f"{language} ", "client ", "sees · ", "δέλτα ", "chunks—", "joined ", "in order ✓"]
    text = "".join(chunks)
    return text, TextReply(text, chunks=chunks)


def test_go_smoke_streams_a_turn(
    go_smoke_binary: Path, server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    text, reply = distinctive_reply("Go")
    fake_model_thread.enqueue(reply)

    result = run_client([str(go_smoke_binary), "-addr", server_process.address, "-prompt", "hello from go"])

    assert_smoke_output(result, server_process, text)
    assert_model_saw(fake_model_thread, "hello from go")


def test_typescript_smoke_streams_a_turn(server_process: ServerProcess, fake_model_thread: FakeAnthropicThread) -> None:
    require_executable("node")
    tsx = require_file(TSX, "tsx (clients/ts/node_modules/.bin/tsx)")
    text, reply = distinctive_reply("TypeScript")
    fake_model_thread.enqueue(reply)

    result = run_client(
        [str(tsx), "src/smoke.ts", "--addr", server_process.address, "--prompt", "hello from ts"],
        cwd=TS_CLIENT_DIR,
    )

    assert_smoke_output(result, server_process, text)
    assert_model_saw(fake_model_thread, "hello from ts")


@pytest.fixture
def unreachable_address() -> Iterator[str]:
    """A loopback address nobody listens on: the port stays bound (so no one else can take it) but
    never listens, so connecting is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        host, port = sock.getsockname()
        yield f"{host}:{port}"


def test_go_smoke_reports_an_unreachable_server(go_smoke_binary: Path, unreachable_address: str) -> None:
    result = run_client([str(go_smoke_binary), "-addr", unreachable_address, "-prompt", "hello from go"])

    details = describe_run(result)
    assert result.returncode == 1, details
    assert result.stdout == "", details  # not even a session line
    assert "smoke: CreateSession failed" in result.stderr, details
    assert "code=Unavailable" in result.stderr, details
