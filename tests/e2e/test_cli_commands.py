"""The client commands of `general-agent` against a live server: sessions list|show|history|fork|reset|delete,
hooks list, checkpoints list|restore and usage, each with --json parsed (list commands: one array of objects with
every field without presence printed), the address from --address or
GENERAL_AGENT_ADDRESS, and a typed error with exit code 1."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from general_agent.sync import AgentClient
from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from tests.e2e.snippets import client_env
from tests.support.subprocess_server import ServerProcess


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "general_agent_server", *args],
        env={**client_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def cli_json(address: str, *args: str) -> Any:
    result = cli(*args, "--json", "--address", address)
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return json.loads(result.stdout)


def test_the_client_commands(server_process: ServerProcess, fake_model_thread: FakeAnthropicThread) -> None:
    address = server_process.address
    fake_model_thread.enqueue(
        Reply(blocks=[ToolUseBlock(id="w1", name="write", input={"path": "notes.txt", "content": "hi"})]),
        TextReply("written"),
    )
    with AgentClient(address) as client:
        sid = client.create_session(mode="CODING", session_key="cli:1").identity.session_id
        other = client.create_session().identity.session_id
        assert client.run_text(sid, "write notes").ok

    listed = cli_json(address, "sessions", "list")
    shown = cli_json(address, "sessions", "show", sid)
    history = cli_json(address, "sessions", "history", sid)
    usage = cli_json(address, "usage", sid)
    checkpoints = cli_json(address, "checkpoints", "list", sid)
    restored = cli_json(address, "checkpoints", "restore", sid, checkpoints[0]["checkpoint_id"])
    fork = cli_json(address, "sessions", "fork", sid, "--new-id", "cli-fork")
    hooks = cli_json(address, "hooks", "list")
    deleted = cli_json(address, "sessions", "delete", "cli-fork")

    # A list command prints one array of objects; every field without presence is there even at its default, in
    # the proto's snake_case names, with 64-bit integers as strings (docs/cli.md).
    assert isinstance(listed, list)
    assert all(isinstance(s, dict) for s in listed)
    assert {s["identity"]["session_id"] for s in listed} == {sid, other}
    idle = next(s for s in listed if s["identity"]["session_id"] == other)
    assert (idle["history_message_count"], idle["pending_call_ids"], idle["labels"]) == (0, [], {})
    assert idle["active_run_id"] == ""
    assert isinstance(idle["last_sequence"], str)
    assert {key for s in listed for key in s if isinstance(s[key], int | str | list)} <= set(idle)
    assert isinstance(history, list)
    assert isinstance(checkpoints, list)
    assert isinstance(shown, dict)
    assert shown["identity"]["session_key"] == "cli:1"
    assert next(e for e in history if "tool_call" in e)["tool_call"]["tool_name"] == "write"
    assert int(usage["cumulative_usage"]["model_calls"]) == 2
    assert [c["tool_name"] for c in checkpoints] == ["write"]
    assert restored["restored_paths"] == ["notes.txt"]
    assert fork["forked_from"]["session_id"] == sid
    assert hooks == []
    assert deleted == {"deleted": True}

    text = cli("sessions", "list", env={"GENERAL_AGENT_ADDRESS": address})  # the address from the environment
    assert text.returncode == 0, text.stderr
    assert sid in text.stdout
    reset = cli("sessions", "reset", sid, "--address", address)
    assert reset.stdout.strip() == f"reset {sid}"
    missing = cli("sessions", "show", "no-such-session", "--address", address)
    assert missing.returncode == 1
    assert "NOT_FOUND SESSION_NOT_FOUND" in missing.stderr
