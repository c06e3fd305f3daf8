"""AgentClient methods against a real in-process server on port 0: approvals (approve, always, deny, the
ApprovalPending error), hosted results, fork / continue, run control, usage, checkpoints, compaction, MCP, hook
registrations and EmitHook, all through keyword arguments and typed errors (no hand-built protobuf)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from general_agent import (
    AgentClient,
    AgentError,
    ApprovalPending,
    ApprovalRequested,
    ApprovalResolved,
    CheckpointNotFound,
    HostedToolCall,
    McpServerNotFound,
    ToolCallAlreadyResolved,
    ToolError,
    UnknownToolCall,
    to_event,
)
from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import hook_registration_pb2, hosted_tool_pb2
from general_agent_server.app import RunningServer

LOOKUP = hosted_tool_pb2.HostedToolDefinition(name="lookup", description="Looks a word up.")


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AgentClient]:
    async with await AgentClient.connect(server.address) as agent_client:
        yield agent_client


def write(call_id: str = "w1", path: str = "a.txt", content: str = "x") -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name="write", input={"path": path, "content": content})])


def tool_results(fake_model: FakeAnthropic) -> list[dict[str, Any]]:
    """The tool_result blocks of the last request the model received."""
    last = fake_model.requests[-1].body["messages"][-1]
    return [block for block in last["content"] if block.get("type") == "tool_result"]


async def test_approve_runs_the_call_and_always_approves_the_tool(
    client: AgentClient, fake_model: FakeAnthropic
) -> None:
    sid = (await client.create_session(mode="CODING", approval_policy=["write"])).identity.session_id
    fake_model.enqueue(write(), TextReply("written"))

    suspended = await client.run_text(sid, "write it")
    [requested] = [to_event(e) for e in suspended.events if e.WhichOneof("event") == "approval_requested"]

    assert suspended.outcome == "SUSPENDED"
    assert suspended.pending_call_ids == ["w1"]
    assert isinstance(requested, ApprovalRequested)
    assert (requested.call_id, requested.tool_name, requested.input) == (
        "w1",
        "write",
        {"path": "a.txt", "content": "x"},
    )
    assert (requested.title, requested.severity, requested.requested_by) == ("Approve write?", "WARNING", "policy")
    assert requested.deadline is not None
    assert requested.sequence > 0
    assert requested.run_id == suspended.run_id
    approved = await client.approve(sid, "w1", always=True)
    assert approved.ok, approved
    assert approved.text == "written"
    session = await client.get_session(sid)
    assert list(session.approved_tools) == ["write"]

    fake_model.enqueue(write("w2", "b.txt"), TextReply("again"))
    assert (await client.run_text(sid, "once more")).text == "again"  # no approval asked: always approved
    with pytest.raises(ToolCallAlreadyResolved):
        await client.deny(sid, "w1", "too late")


async def test_an_edited_input_is_what_runs(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session(mode="CODING", approval_policy=["write"])).identity.session_id
    fake_model.enqueue(write(content="draft"), TextReply("ok"))
    await client.run_text(sid, "write it")

    result = await client.approve(sid, "w1", {"path": "a.txt", "content": "final"})

    resolved = next(to_event(e) for e in result.events if e.WhichOneof("event") == "approval_resolved")
    assert isinstance(resolved, ApprovalResolved)
    assert resolved.input == {"path": "a.txt", "content": "final"}
    checkpoints = [c async for c in client.list_checkpoints(sid)]
    assert [c.tool_name for c in checkpoints] == ["write"]
    restored = await client.restore_checkpoint(sid, checkpoints[0].checkpoint_id)
    assert list(restored.restored_paths) == ["a.txt"]
    with pytest.raises(CheckpointNotFound):
        await client.restore_checkpoint(sid, "no-such-checkpoint")


async def test_deny_shows_the_message_to_the_model(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session(mode="CODING", approval_policy=["write"])).identity.session_id
    fake_model.enqueue(write(), TextReply("understood"))
    await client.run_text(sid, "write it")

    denied = await client.deny(sid, "w1", "not in this folder")

    errors = [to_event(e) for e in denied.events if e.WhichOneof("event") == "tool_error"]
    assert [(e.call_id, e.error) for e in errors if isinstance(e, ToolError)] == [("w1", "not in this folder")]
    assert denied.text == "understood"
    [result] = tool_results(fake_model)
    assert result["is_error"] is True
    assert "not in this folder" in str(result["content"])


async def test_a_hosted_call_awaiting_approval_is_approval_pending(
    client: AgentClient, fake_model: FakeAnthropic
) -> None:
    sid = (await client.create_session(hosted_tools=[LOOKUP], approval_policy=["lookup"])).identity.session_id
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="h1", name="lookup", input={"word": "kayak"})]), TextReply("found")
    )
    await client.run_text(sid, "look it up")

    with pytest.raises(ApprovalPending) as pending:
        await client.submit_hosted_result(sid, "h1", "a boat")
    assert pending.value.reason == "APPROVAL_PENDING"
    approved = await client.approve(sid, "h1")
    hosted = [to_event(e) for e in approved.events if e.WhichOneof("event") == "hosted_tool_call"]
    assert [(h.call_id, h.input) for h in hosted if isinstance(h, HostedToolCall)] == [("h1", {"word": "kayak"})]
    finished = await client.submit_hosted_result(sid, "h1", {"meaning": "a boat", "letters": 2**60 + 1})

    assert finished.ok
    assert finished.text == "found"
    assert '"letters":1152921504606846977' in str(tool_results(fake_model)[0]["content"])  # exact JSON
    with pytest.raises(UnknownToolCall):
        await client.submit_hosted_result(sid, "nope", "x")


async def test_fork_continue_and_run_control(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session(session_key="chat:1", labels={"t": "x"})).identity.session_id
    fake_model.enqueue(TextReply("first"))
    await client.run_text(sid, "hello")

    fork = await client.fork_session(sid, session_id=f"{sid}-fork", system_prompt="forked")
    continued = await client.continue_session(sid, session_key="chat:2", model_ref="claude-haiku-4-5")

    assert fork.forked_from.session_id == sid
    assert fork.system_prompt == "forked"
    assert fork.history_message_count == 2
    assert (continued.identity.session_key, continued.model_ref) == ("chat:2", "claude-haiku-4-5")
    assert await client.inject(sid, "steer") == ""  # idle: nothing to steer
    assert await client.cancel_run(sid) == ""
    assert await client.request_stop(sid) == ""
    assert (await client.get_session(sid)).stop_requested
    assert await client.clear_stop(sid) is True
    assert await client.clear_stop(sid) is False
    usage = await client.usage(sid)
    assert usage.cumulative_usage.model_calls == 1
    compacted = await client.request_compaction(sid)
    assert not compacted.compacted  # nothing older than the recent turns
    assert not (await client.maybe_compact(sid, threshold_pct=99, cooldown=0)).compacted


async def test_mcp_hooks_and_emit_hook(client: AgentClient) -> None:
    sid = (await client.create_session()).identity.session_id

    assert await client.set_mcp_servers(sid, {}) == []
    assert await client.get_mcp_servers(sid) == ({}, [])
    assert await client.mcp_status(sid) == []
    with pytest.raises(McpServerNotFound):
        await client.toggle_mcp_server(sid, "missing", enabled=False)
    registration = hook_registration_pb2.HookRegistration(
        plugin_id="observer",
        target=hook_registration_pb2.HookTarget(address="127.0.0.1:9"),
        hooks=[hook_registration_pb2.HookBinding(name=hook_registration_pb2.HOOK_NAME_MESSAGE_RECEIVED)],
    )
    stored = await client.register_hooks(registration)
    assert stored.plugin_id == "observer"
    assert [r.plugin_id for r in await client.list_hook_registrations()] == ["observer"]
    assert await client.unregister_hooks("observer") is True
    assert await client.list_hook_registrations() == []
    emitted = await client.emit_hook("message_received", {"from": "u1", "content": "hi"}, session_id=sid)
    assert emitted.handler_count == 0
    with pytest.raises(AgentError) as unknown:
        await client.emit_hook("no_such_hook")
    assert unknown.value.code_name == "INVALID_ARGUMENT"


async def test_an_empty_approval_policy_is_set_not_unset(client: AgentClient) -> None:
    empty = await client.create_session(approval_policy=[])
    unset = await client.create_session()

    assert empty.HasField("approval_policy")
    assert not unset.HasField("approval_policy")
    resumed = await client.resume_session(unset.identity.session_id, approval_policy=["all"])
    assert list(resumed.approval_policy.entries) == ["all"]
