"""The file tools through real turns (real gRPC server, fake model): write, edit, apply_patch, glob and grep
produce tool_result events and change the session workspace; failures and escapes (`..`, symbolic links) are
tool_error events the model sees as is_error; GENERAL sessions get only the read-only file tools."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, session_pb2
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of
from tests.support.rpc import Stub, create_session, stream_turn

SECRET = "outside secret"
FILE_TOOLS = ["read", "write", "edit", "apply_patch", "glob", "grep"]


@dataclass
class Env:
    stub: Stub
    root: Path
    outside: Path

    def workspace(self, session_id: str) -> Path:
        path = self.root / "default" / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path


@pytest.fixture
async def env(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Env]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces")})
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield Env(stub=agent_service_pb2_grpc.AgentServiceStub(channel), root=tmp_path / "workspaces", outside=outside)


async def new_session(stub: Stub, mode: session_pb2.SessionMode.ValueType = session_pb2.SESSION_MODE_CODING) -> str:
    session = await create_session(stub, identity=session_pb2.SessionIdentity(mode=mode))
    return session.identity.session_id


def call(call_id: str, name: str, **arguments: Any) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name=name, input=arguments)])


def result_sent(fake_model: FakeAnthropic, request_index: int) -> dict[str, Any]:
    """The one tool_result block of a model request's last message."""
    blocks = [b for b in fake_model.requests[request_index].messages[-1]["content"] if b.get("type") == "tool_result"]
    assert len(blocks) == 1
    block: dict[str, Any] = blocks[0]
    return block


def offered(fake_model: FakeAnthropic, request_index: int = -1) -> list[str]:
    return [tool["name"] for tool in fake_model.requests[request_index].tools]


async def one_call(env: Env, fake_model: FakeAnthropic, sid: str, reply: Reply) -> list[Any]:
    fake_model.enqueue(reply, TextReply("ok"))
    return await stream_turn(env.stub, sid, "go")


async def test_tool_policy_by_mode(env: Env, fake_model: FakeAnthropic) -> None:
    general = await new_session(env.stub, session_pb2.SESSION_MODE_GENERAL)
    await stream_turn(env.stub, general, "hi")
    names = offered(fake_model)
    assert [n for n in FILE_TOOLS if n in names] == ["read", "glob", "grep"]
    coding = await new_session(env.stub)
    await stream_turn(env.stub, coding, "hi")
    names = offered(fake_model)
    assert [n for n in names if n in FILE_TOOLS] == FILE_TOOLS
    tools = {t["name"]: t for t in fake_model.requests[-1].tools}
    assert tools["edit"]["input_schema"]["required"] == ["path", "oldText", "newText"]
    assert tools["apply_patch"]["input_schema"]["required"] == ["input"]
    # A GENERAL session that asks for write anyway gets a tool error, and nothing is written.
    events = await one_call(env, fake_model, general, call("toolu_w", "write", path="x.txt", content="x"))
    assert last_of(events, "tool_error").error == "Tool write not found"
    assert not (env.workspace(general) / "x.txt").exists()


async def test_write_then_edit(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    events = await one_call(env, fake_model, sid, call("toolu_1", "write", path="src/app.py", content="x = 1\ny = 2\n"))
    assert kinds(events)[2:5] == ["tool_call", "tool_result", "turn_complete"]
    result = last_of(events, "tool_result")
    assert (result.tool_name, result.is_error) == ("write", False)
    assert result.output[0].text.text == "Successfully wrote 3 lines to src/app.py"
    assert (env.workspace(sid) / "src" / "app.py").read_text() == "x = 1\ny = 2\n"

    events = await one_call(
        env, fake_model, sid, call("toolu_2", "edit", path="src/app.py", oldText="y = 2", newText="y = 3")
    )
    result = last_of(events, "tool_result")
    expected = "Successfully replaced text in src/app.py.\n\n 1 x = 1\n-2 y = 2\n+2 y = 3"
    assert result.output[0].text.text == expected
    assert MessageToDict(result.details) == {"path": "src/app.py", "first_changed_line": 2, "fuzzy_match": False}
    assert result_sent(fake_model, 3)["content"] == expected
    assert (env.workspace(sid) / "src" / "app.py").read_text() == "x = 1\ny = 3\n"

    # A failing edit is a tool_error the model sees as is_error, and the file is unchanged.
    events = await one_call(env, fake_model, sid, call("toolu_3", "edit", path="src/app.py", oldText="z", newText="w"))
    assert "tool_result" not in kinds(events)
    error = last_of(events, "tool_error")
    assert error.error == (
        "Could not find the exact text in src/app.py. The old text must match exactly including all whitespace and "
        "newlines."
    )
    block = result_sent(fake_model, 5)
    assert (block["is_error"], block["content"]) == (True, error.error)
    assert (env.workspace(sid) / "src" / "app.py").read_text() == "x = 1\ny = 3\n"


async def test_apply_patch(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    workspace = env.workspace(sid)
    (workspace / "a.txt").write_text("one\ntwo\n")
    (workspace / "old.txt").write_text("bye\n")
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Add File: docs/new.md",
            "+# New",
            "*** Update File: a.txt",
            "@@",
            " one",
            "-two",
            "+2",
            "*** Delete File: old.txt",
            "*** End Patch",
        ]
    )
    events = await one_call(env, fake_model, sid, call("toolu_p", "apply_patch", input=patch))
    result = last_of(events, "tool_result")
    assert result.output[0].text.text == "Success. Updated the following files:\nA docs/new.md\nM a.txt\nD old.txt"
    assert MessageToDict(result.details) == {
        "summary": {"added": ["docs/new.md"], "modified": ["a.txt"], "deleted": ["old.txt"]}
    }
    assert (workspace / "docs" / "new.md").read_text() == "# New\n"
    assert (workspace / "a.txt").read_text() == "one\n2\n"
    assert not (workspace / "old.txt").exists()

    # A patch whose last hunk fails changes nothing at all.
    bad = "\n".join(
        [
            "*** Begin Patch",
            "*** Add File: docs/other.md",
            "+# Other",
            "*** Update File: a.txt",
            "-one",
            "+1",
            "*** Delete File: missing.txt",
            "*** End Patch",
        ]
    )
    events = await one_call(env, fake_model, sid, call("toolu_bad", "apply_patch", input=bad))
    assert last_of(events, "tool_error").error == "Failed to delete missing.txt: File not found"
    assert (workspace / "a.txt").read_text() == "one\n2\n"
    assert sorted(os.listdir(workspace / "docs")) == ["new.md"]


async def test_glob_and_grep_in_a_general_session(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub, session_pb2.SESSION_MODE_GENERAL)
    workspace = env.workspace(sid)
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "mod.py").write_text("def handler():\n    return 'ok'\n")
    (workspace / "README.md").write_text("see handler\n")
    fake_model.enqueue(
        Reply(
            blocks=[
                ToolUseBlock(id="toolu_g", name="glob", input={"pattern": "**/*.py"}),
                ToolUseBlock(id="toolu_r", name="grep", input={"pattern": "handler", "glob": "*.py"}),
            ]
        ),
        TextReply("found"),
    )
    events = await stream_turn(env.stub, sid, "find the handler")
    results = {e.tool_result.tool_name: e.tool_result for e in events if e.WhichOneof("event") == "tool_result"}
    assert results["glob"].output[0].text.text == "pkg/mod.py"
    assert results["grep"].output[0].text.text == "pkg/mod.py:1:def handler():"
    assert MessageToDict(results["grep"].details)["matches"] == 1


async def test_escapes_are_tool_errors(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    workspace = env.workspace(sid)
    (workspace / "a.txt").write_text("one\n")
    os.symlink(env.outside, workspace / "out")
    os.symlink(env.outside / "secret.txt", workspace / "secret_link")
    attempts = [
        ("write", {"path": "../../escape.txt", "content": "x"}),
        ("write", {"path": "out/planted.txt", "content": "x"}),
        ("edit", {"path": "secret_link", "oldText": SECRET, "newText": "public"}),
        ("apply_patch", {"input": "*** Begin Patch\n*** Add File: out/evil.txt\n+x\n*** End Patch"}),
        ("read", {"path": "out/secret.txt"}),
        ("glob", {"pattern": "*", "path": "out"}),
        ("grep", {"pattern": "secret", "path": "../.."}),
    ]
    for index, (name, arguments) in enumerate(attempts):
        events = await one_call(env, fake_model, sid, call(f"toolu_e{index}", name, **arguments))
        assert "tool_result" not in kinds(events), name
        error = last_of(events, "tool_error")
        assert error.tool_name == name
        assert error.error.startswith("Path escapes workspace root: "), (name, error.error)
        block = result_sent(fake_model, 2 * index + 1)
        assert block["is_error"] is True
        assert SECRET not in block["content"]
    assert sorted(os.listdir(env.outside)) == ["secret.txt"]
    assert (env.outside / "secret.txt").read_text() == SECRET
    assert not (env.root / "escape.txt").exists()
    assert (workspace / "a.txt").read_text() == "one\n"


def kinds_of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.WhichOneof("event") == kind]


async def test_a_workspace_is_created_by_the_first_write_not_by_a_search(env: Env, fake_model: FakeAnthropic) -> None:
    """A session that only searches puts nothing on disk: its workspace is empty to glob, grep and read; the
    first write creates it, and the next search sees what was written."""
    sid = await new_session(env.stub)
    workspace = env.root / "default" / sid
    fake_model.enqueue(
        Reply(
            blocks=[
                ToolUseBlock(id="toolu_g", name="glob", input={"pattern": "**/*"}),
                ToolUseBlock(id="toolu_r", name="grep", input={"pattern": "x"}),
                ToolUseBlock(id="toolu_d", name="read", input={"path": "notes.md"}),
                ToolUseBlock(id="toolu_s", name="glob", input={"pattern": "*", "path": "sub"}),
            ]
        ),
        TextReply("nothing yet"),
    )
    events = await stream_turn(env.stub, sid, "look around")
    results = {e.tool_result.call_id: e.tool_result.output[0].text.text for e in kinds_of(events, "tool_result")}
    errors = {e.tool_error.call_id: e.tool_error.error for e in kinds_of(events, "tool_error")}
    assert results == {"toolu_g": "No files found.", "toolu_r": "No matches found."}
    assert errors == {"toolu_d": "File not found: notes.md", "toolu_s": "File not found: sub"}
    assert not workspace.exists()

    await one_call(env, fake_model, sid, call("toolu_w", "write", path="notes.md", content="x marks\n"))
    assert (workspace / "notes.md").read_text() == "x marks\n"
    events = await one_call(env, fake_model, sid, call("toolu_g2", "grep", pattern="x"))
    assert last_of(events, "tool_result").output[0].text.text == "notes.md:1:x marks"
