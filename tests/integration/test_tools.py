"""The `read` built-in through real turns: tool_call/tool_result events in protocol order (docs/protocol.md), what the
model receives back, argument validation, workspace confinement, output caps and the tool policy by mode."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.conftest import ServerFactory
from tests.support.events import ONE_TOOL_ERROR_THEN_TEXT, ONE_TOOL_THEN_TEXT, kinds, last_of
from tests.support.rpc import Stub, create_session, stream_turn

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

READ_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path, relative to the workspace."},
        "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
        "limit": {"type": "integer", "minimum": 1, "description": "Lines to read (default 2000)."},
    },
    "required": ["path"],
    "additionalProperties": False,
}


@dataclass
class Env:
    stub: Stub
    root: Path

    def workspace(self, session_id: str) -> Path:
        path = self.root / "default" / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path


@asynccontextmanager
async def open_env(
    server_factory: ServerFactory, root: Path, extra: dict[str, str] | None = None
) -> AsyncIterator[Env]:
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(root), **(extra or {})})
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield Env(stub=agent_service_pb2_grpc.AgentServiceStub(channel), root=root)


@pytest.fixture
async def env(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Env]:
    async with open_env(server_factory, tmp_path / "workspaces") as value:
        yield value


def read_call(call_id: str, **arguments: Any) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name="read", input=arguments)])


def numbered(lines: list[str], start: int = 1) -> str:
    return "\n".join(f"{number:6}\t{line}" for number, line in enumerate(lines, start=start))


def tool_results_sent(fake_model: FakeAnthropic, request_index: int) -> list[dict[str, Any]]:
    """The tool_result blocks of the last user message of one model request."""
    last = fake_model.requests[request_index].messages[-1]
    assert last["role"] == "user"
    return [b for b in last["content"] if b.get("type") == "tool_result"]


async def new_session(stub: Stub, mode: session_pb2.SessionMode.ValueType = session_pb2.SESSION_MODE_CODING) -> str:
    session = await create_session(stub, identity=session_pb2.SessionIdentity(mode=mode))
    return session.identity.session_id


async def test_read_happy_path(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    lines = ["alpha", "beta", "gamma", "delta"]
    (env.workspace(sid) / "notes.txt").write_text("\n".join(lines) + "\n")
    fake_model.enqueue(read_call("toolu_r1", path="notes.txt"), TextReply("four lines"))
    events = await stream_turn(env.stub, sid, "read notes.txt")
    assert kinds(events) == ONE_TOOL_THEN_TEXT
    call = last_of(events, "tool_call")
    assert (call.call_id, call.tool_name, call.input_json) == ("toolu_r1", "read", '{"path":"notes.txt"}')
    result = last_of(events, "tool_result")
    assert (result.call_id, result.tool_name, result.is_error) == ("toolu_r1", "read", False)
    assert [p.text.text for p in result.output] == [numbered(lines)]
    assert result.output[0].text.text.splitlines()[1] == "     2\tbeta"
    assert dict(result.details.struct_value) == {
        "path": "notes.txt",
        "total_lines": 4.0,
        "start_line": 1.0,
        "end_line": 4.0,
    }
    assert last_of(events, "turn_complete").stop_reason == event_pb2.STOP_REASON_STOP
    tool_use_complete = next(e.turn_complete for e in events if e.WhichOneof("event") == "turn_complete")
    assert tool_use_complete.stop_reason == event_pb2.STOP_REASON_TOOL_USE
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.usage.model_calls) == (event_pb2.RUN_OUTCOME_COMPLETED, 2)
    # The second request: the user turn, the assistant's tool_use, then the tool_result.
    assert len(fake_model.requests) == 2
    messages = fake_model.requests[1].messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "toolu_r1", "name": "read", "input": {"path": "notes.txt"}}
    ]
    assert messages[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_r1",
            "content": numbered(lines),
            "cache_control": {"type": "ephemeral"},
        }
    ]
    # The transcript keeps the call and its result.
    history = await env.stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    entries = [e.WhichOneof("entry") for e in history.entries]
    assert entries == ["system_prompt", "message", "tool_call", "tool_result", "assistant"]
    stored = history.entries[3].tool_result
    assert (stored.call_id, stored.is_error, stored.output[0].text.text) == ("toolu_r1", False, numbered(lines))


async def test_read_offset_and_limit(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    lines = [f"line {i}" for i in range(1, 11)]
    (env.workspace(sid) / "ten.txt").write_text("\n".join(lines))
    fake_model.enqueue(read_call("toolu_o", path="ten.txt", offset=3, limit=2), TextReply("ok"))
    events = await stream_turn(env.stub, sid, "lines 3-4")
    expected = numbered(["line 3", "line 4"], start=3) + "\n\n[showing lines 3-4 of 10; use offset=5 to continue]"
    result = last_of(events, "tool_result")
    assert result.output[0].text.text == expected
    assert dict(result.details.struct_value) == {
        "path": "ten.txt",
        "total_lines": 10.0,
        "start_line": 3.0,
        "end_line": 4.0,
    }
    assert tool_results_sent(fake_model, 1)[0]["content"] == expected
    # An offset past the end is an error the model sees.
    fake_model.enqueue(read_call("toolu_o2", path="ten.txt", offset=50), TextReply("ok"))
    events = await stream_turn(env.stub, sid, "line 50")
    assert "tool_result" not in kinds(events)
    error = last_of(events, "tool_error")
    assert error.error == "offset 50 is beyond the end of ten.txt (10 lines)"
    assert tool_results_sent(fake_model, 3)[0]["is_error"] is True


async def test_read_image_reaches_the_model_as_an_image(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    (env.workspace(sid) / "pixel.png").write_bytes(PNG)
    fake_model.enqueue(read_call("toolu_img", path="pixel.png"), TextReply("a pixel"))
    events = await stream_turn(env.stub, sid, "look at pixel.png")
    assert kinds(events) == ONE_TOOL_THEN_TEXT
    result = last_of(events, "tool_result")
    assert [p.WhichOneof("part") for p in result.output] == ["text", "image"]
    assert result.output[0].text.text == f"Image pixel.png (image/png, {len(PNG)} bytes)"
    assert (result.output[1].image.mime_type, result.output[1].image.data) == ("image/png", PNG)
    block = tool_results_sent(fake_model, 1)[0]
    assert block["tool_use_id"] == "toolu_img"
    assert "is_error" not in block
    assert block["content"] == [
        {"type": "text", "text": f"Image pixel.png (image/png, {len(PNG)} bytes)"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()},
        },
    ]


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"path": 7}, "path: 7 is not of type 'string'"),
        ({}, "(root): 'path' is a required property"),
        ({"path": "a.txt", "offset": 0}, "offset: 0 is less than the minimum of 1"),
        ({"path": "a.txt", "mode": "rb"}, "(root): Additional properties are not allowed"),
    ],
)
async def test_schema_invalid_arguments_are_a_tool_error(
    env: Env, fake_model: FakeAnthropic, arguments: dict[str, Any], where: str
) -> None:
    sid = await new_session(env.stub)
    (env.workspace(sid) / "a.txt").write_text("content")
    fake_model.enqueue(read_call("toolu_bad", **arguments), TextReply("sorry"))
    events = await stream_turn(env.stub, sid, "read it")
    assert kinds(events) == ONE_TOOL_ERROR_THEN_TEXT
    error = last_of(events, "tool_error")
    assert (error.call_id, error.tool_name) == ("toolu_bad", "read")
    assert error.error.startswith(f"Invalid arguments for tool read: {where}")
    block = tool_results_sent(fake_model, 1)[0]
    assert block["is_error"] is True
    assert block["content"] == error.error
    assert block["content"].startswith("Invalid arguments for tool read")


async def test_unknown_tool_is_a_tool_error(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_x", name="x", input={})]), TextReply("no such tool"))
    events = await stream_turn(env.stub, sid, "call x")
    assert kinds(events)[2:5] == ["tool_call", "tool_error", "turn_complete"]
    assert last_of(events, "tool_error").error == "Tool x not found"
    block = tool_results_sent(fake_model, 1)[0]
    assert (block["tool_use_id"], block["content"], block["is_error"]) == ("toolu_x", "Tool x not found", True)


async def test_paths_outside_the_workspace_are_refused(env: Env, fake_model: FakeAnthropic, tmp_path: Path) -> None:
    sid = await new_session(env.stub)
    workspace = env.workspace(sid)
    (workspace.parent / "outside.txt").write_text("sibling secret")
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, workspace / "link.txt")
    (workspace / "inside.txt").write_text("fine")
    os.symlink(workspace / "inside.txt", workspace / "inner-link.txt")
    for index, path in enumerate(["../outside.txt", str(secret), "link.txt"]):
        fake_model.enqueue(read_call(f"toolu_esc{index}", path=path), TextReply("refused"))
        events = await stream_turn(env.stub, sid, f"read {path}")
        assert "tool_result" not in kinds(events), path
        error = last_of(events, "tool_error")
        assert "outside the workspace" in error.error, path
        block = tool_results_sent(fake_model, 2 * index + 1)[0]
        assert block["is_error"] is True
        assert "outside the workspace" in block["content"]
        assert "sibling secret" not in block["content"]
        assert "top secret" not in block["content"]
    # A link that stays inside the workspace, and an absolute path inside it, are fine.
    for index, path in enumerate(["inner-link.txt", str(workspace / "inside.txt")]):
        fake_model.enqueue(read_call(f"toolu_in{index}", path=path), TextReply("ok"))
        events = await stream_turn(env.stub, sid, f"read {path}")
        assert last_of(events, "tool_result").output[0].text.text == "     1\tfine", path


async def test_two_reads_in_one_message_keep_call_order(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    workspace = env.workspace(sid)
    # The first file is much larger, so it is the slower of the two concurrent reads.
    big = [f"row {i} " + "x" * 200 for i in range(3000)]
    (workspace / "big.txt").write_text("\n".join(big))
    (workspace / "small.txt").write_text("tiny")
    fake_model.enqueue(
        Reply(
            blocks=[
                TextBlock("Reading both."),
                ToolUseBlock(id="toolu_a", name="read", input={"path": "big.txt", "limit": 3000}),
                ToolUseBlock(id="toolu_b", name="read", input={"path": "small.txt"}),
            ]
        ),
        TextReply("both read"),
    )
    events = await stream_turn(env.stub, sid, "read both")
    assert kinds(events) == [
        "run_started",
        "assistant_delta",
        "usage_snapshot",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "turn_complete",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    order = [
        (e.WhichOneof("event"), getattr(e, e.WhichOneof("event")).call_id)
        for e in events
        if e.WhichOneof("event") in ("tool_call", "tool_result")
    ]
    assert order == [
        ("tool_call", "toolu_a"),
        ("tool_call", "toolu_b"),
        ("tool_result", "toolu_a"),
        ("tool_result", "toolu_b"),
    ]
    blocks = tool_results_sent(fake_model, 1)
    assert [b["tool_use_id"] for b in blocks] == ["toolu_a", "toolu_b"]
    assert blocks[0]["content"].startswith("     1\trow 0 ")
    assert blocks[1]["content"] == "     1\ttiny"
    # Both results travel in one user message, right after the assistant message.
    assert [m["role"] for m in fake_model.requests[1].messages] == ["user", "assistant", "user"]


async def test_output_cap_truncates_with_a_notice(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    async with open_env(server_factory, tmp_path / "ws", {"GENERAL_AGENT_MAX_TOOL_OUTPUT_CHARS": "50"}) as env:
        sid = await new_session(env.stub)
        lines = [f"line number {i}" for i in range(1, 21)]
        (env.workspace(sid) / "long.txt").write_text("\n".join(lines))
        full = numbered(lines)
        fake_model.enqueue(read_call("toolu_cap", path="long.txt"), TextReply("truncated"))
        events = await stream_turn(env.stub, sid, "read long.txt")
        result = last_of(events, "tool_result")
        texts = [p.text.text for p in result.output]
        notice = f"[output truncated: 50 of {len(full)} characters shown]"
        assert texts[0] == full[:50]
        assert texts[-1].strip() == notice
        content = tool_results_sent(fake_model, 1)[0]["content"]
        assert content.startswith(full[:50])
        assert content.endswith(notice)
        assert full[:51] not in content


async def test_tool_definitions_sent_to_the_model(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub)
    await stream_turn(env.stub, sid, "hi")
    tools = {t["name"]: t for t in fake_model.requests[0].tools}
    assert "read" in tools
    assert tools["read"]["input_schema"] == READ_SCHEMA
    assert tools["read"]["description"].startswith("Read a file from the workspace.")


async def test_general_mode_session_gets_read(env: Env, fake_model: FakeAnthropic) -> None:
    sid = await new_session(env.stub, mode=session_pb2.SESSION_MODE_GENERAL)
    (env.workspace(sid) / "faq.txt").write_text("Q: why?\nA: because.")
    fake_model.enqueue(read_call("toolu_g", path="faq.txt"), TextReply("because"))
    events = await stream_turn(env.stub, sid, "read the faq")
    assert "read" in [t["name"] for t in fake_model.requests[0].tools]
    assert kinds(events) == ONE_TOOL_THEN_TEXT
    assert last_of(events, "tool_result").output[0].text.text == numbered(["Q: why?", "A: because."])
    # The unspecified mode is GENERAL, and gets it too.
    default_sid = (await create_session(env.stub)).identity.session_id
    await stream_turn(env.stub, default_sid, "hi")
    assert "read" in [t["name"] for t in fake_model.requests[-1].tools]


async def test_shared_workspace_mode_gives_every_session_the_root(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    (root / "common.txt").write_text("shared line")
    async with open_env(server_factory, root, {"GENERAL_AGENT_WORKSPACE_MODE": "shared"}) as shared:
        for call_id in ("toolu_a", "toolu_b"):
            sid = await new_session(shared.stub)
            fake_model.enqueue(read_call(call_id, path="common.txt"), TextReply("ok"))
            events = await stream_turn(shared.stub, sid, "read it")
            assert last_of(events, "tool_result").output[0].text.text == numbered(["shared line"])
        assert not (root / "default").exists()
