"""The generated Go and TypeScript clients against a live `general-agent serve` subprocess.

Each test runs the client's smoke program (create a session, stream one turn), checks what it printed
and checks that the user's prompt reached the model unchanged. In RunSession mode (`approve`, `hosted`)
the program answers an approval of `write` and a hosted call made in the same model message; the
file is written, and the model sees both results.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
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


def enqueue_write_and_lookup(fake: FakeAnthropicThread, language: str) -> str:
    """One model message calling `write` (needs approval) then the hosted `lookup`; then a text reply."""
    text, reply = distinctive_reply(language)
    write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": f"{language} notes"})
    lookup = ToolUseBlock(id="toolu_h", name="lookup", input={"q": language})
    fake.enqueue(Reply(blocks=[write, lookup], stop_reason="tool_use"), reply)
    return text


def assert_answered_approval_and_hosted_call(
    result: subprocess.CompletedProcess[str],
    server: ServerProcess,
    fake: FakeAnthropicThread,
    *,
    language: str,
    answered_by: str,
    expected_text: str,
) -> None:
    """The program printed the approval and the hosted call it answered, the run completed, the approved write
    ran (the file exists) and the model got both results, not as errors."""
    details = describe_run(result, server)
    assert result.returncode == 0, details
    lines = result.stdout.splitlines()
    assert len(lines) == 5, details
    match = SESSION_LINE.fullmatch(lines[0])
    assert match is not None, details
    session_id = match.group(1)
    assert lines[1:] == [
        "approval: write toolu_w Approve write?",
        f'hosted: lookup toolu_h {{"q":"{language}"}}',
        f"text: {expected_text}",
        "outcome: RUN_OUTCOME_COMPLETED",
    ], details
    [written] = list(server.state_dir.rglob(f"{session_id}/notes.txt"))
    assert written.read_text() == f"{language} notes"

    requests = fake.wait_for_requests(2, timeout=5.0)
    assert len(requests) == 2, [r.body for r in requests]
    results = {block["tool_use_id"]: block for block in requests[1].messages[-1]["content"]}
    assert set(results) == {"toolu_w", "toolu_h"}, results
    assert not any(block.get("is_error") for block in results.values()), results
    hosted_output = results["toolu_h"]["content"]
    hosted_text = hosted_output if isinstance(hosted_output, str) else hosted_output[0]["text"]
    assert json.loads(hosted_text) == {"answered_by": answered_by, "tool": "lookup", "input": {"q": language}}
    assert fake.pending_replies == 0


def test_go_smoke_answers_an_approval_and_a_hosted_call(
    go_smoke_binary: Path, server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    text = enqueue_write_and_lookup(fake_model_thread, "Go")

    command = [str(go_smoke_binary), "-addr", server_process.address, "-prompt", "write notes", "-mode", "coding"]
    result = run_client([*command, "-approve", "write", "-hosted", "lookup"])

    assert_answered_approval_and_hosted_call(
        result, server_process, fake_model_thread, language="Go", answered_by="go-smoke", expected_text=text
    )


def test_typescript_smoke_answers_an_approval_and_a_hosted_call(
    server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    require_executable("node")
    tsx = require_file(TSX, "tsx (clients/ts/node_modules/.bin/tsx)")
    text = enqueue_write_and_lookup(fake_model_thread, "TypeScript")

    command = [str(tsx), "src/smoke.ts", "--addr", server_process.address, "--prompt", "write notes"]
    result = run_client([*command, "--mode", "coding", "--approve", "write", "--hosted", "lookup"], cwd=TS_CLIENT_DIR)

    assert_answered_approval_and_hosted_call(
        result, server_process, fake_model_thread, language="TypeScript", answered_by="ts-smoke", expected_text=text
    )


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
