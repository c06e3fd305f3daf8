"""Tool approvals across a real process crash: two calls wait for approval in one server process, SIGKILL it,
answer both (in reverse order) on a new process over the same state dir; the approved call runs once, the
denied one never, and the model gets both results in call order in one request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from general_agent.testing import FakeAnthropicThread, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import approval_pb2, event_pb2, session_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import kinds, last_of
from tests.support.rpc import connect, create_session, get_session, stream_turn
from tests.support.subprocess_server import ServerProcesses


async def test_two_approvals_pending_at_sigkill_are_answered_on_the_restarted_server(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread, tmp_path: Path
) -> None:
    server = server_processes.make(extra={"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})
    fake_model_thread.enqueue(
        Reply(
            blocks=[
                TextBlock("Writing two files."),
                ToolUseBlock(id="toolu_a", name="write", input={"path": "a.txt", "content": "first"}),
                ToolUseBlock(id="toolu_b", name="write", input={"path": "b.txt", "content": "second"}),
            ],
            stop_reason="tool_use",
        ),
        TextReply("One written, one refused."),
    )
    address = server.start()
    async with connect(address) as stub:
        session = await create_session(
            stub,
            identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING),
            approval_policy=approval_pb2.ApprovalPolicy(entries=["mutating"]),
        )
        sid = session.identity.session_id
        first = await stream_turn(stub, sid, "Write a.txt and b.txt.")
    asked = [e.approval_requested for e in first if e.WhichOneof("event") == "approval_requested"]
    assert [a.call_id for a in asked] == ["toolu_a", "toolu_b"]
    assert asked[0].severity == approval_pb2.APPROVAL_SEVERITY_WARNING
    assert asked[0].requested_by == "policy"
    assert json.loads(asked[1].input_json) == {"path": "b.txt", "content": "second"}
    assert last_of(first, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    server.kill()

    address = server.start()
    async with connect(address) as stub:
        state = await get_session(stub, sid)
        assert state.state == session_pb2.SESSION_STATE_SUSPENDED
        assert list(state.pending_call_ids) == ["toolu_a", "toolu_b"]
        assert list(state.approval_policy.entries) == ["mutating"]
        deny = turn_api.ResolveApprovalRequest(
            session_id=sid, call_id="toolu_b", decision=approval_pb2.APPROVAL_DECISION_DENY, message="Not b."
        )
        denied = [r.event async for r in stub.ResolveApproval(deny)]
        approve = turn_api.ResolveApprovalRequest(
            session_id=sid, call_id="toolu_a", decision=approval_pb2.APPROVAL_DECISION_APPROVE_ALWAYS
        )
        approved = [r.event async for r in stub.ResolveApproval(approve)]
        again = [r.event async for r in stub.ResolveApproval(approve)]
        after = await get_session(stub, sid)
    assert kinds(denied) == ["approval_resolved", "tool_error", "run_finished"]
    assert list(last_of(denied, "run_finished").pending_call_ids) == ["toolu_a"]
    assert kinds(approved)[:2] == ["approval_resolved", "tool_result"]
    assert last_of(approved, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert [e.sequence for e in again] == [e.sequence for e in approved]
    assert list(after.approved_tools) == ["write"]
    workspace = tmp_path / "ws" / "default" / sid
    assert (workspace / "a.txt").read_text() == "first"
    assert not (workspace / "b.txt").exists()
    assert len(fake_model_thread.requests) == 2
    results = fake_model_thread.requests[1].messages[2]["content"]
    assert [b["tool_use_id"] for b in results] == ["toolu_a", "toolu_b"]
    assert [b.get("is_error", False) for b in results] == [False, True]
    assert "Not b." in json.dumps(results[1]["content"])


async def test_an_approved_call_cut_off_by_sigkill_is_reported_and_never_run_again(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread, tmp_path: Path
) -> None:
    server = server_processes.make(extra={"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})
    marker = "started-once"
    command = f"echo {marker} >> runs.log; sleep 60"
    fake_model_thread.enqueue(
        Reply(blocks=[ToolUseBlock(id="toolu_x", name="exec", input={"command": command})], stop_reason="tool_use")
    )
    address = server.start()
    async with connect(address) as stub:
        session = await create_session(
            stub,
            identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING),
            approval_policy=approval_pb2.ApprovalPolicy(entries=["exec"]),
        )
        sid = session.identity.session_id
        await stream_turn(stub, sid, "Run it.")
        approve = turn_api.ResolveApprovalRequest(
            session_id=sid, call_id="toolu_x", decision=approval_pb2.APPROVAL_DECISION_APPROVE
        )
        stream = stub.ResolveApproval(approve)
        first = await stream.read()
        assert isinstance(first, turn_api.ResolveApprovalResponse)
        assert first.event.WhichOneof("event") == "approval_resolved"
        log = tmp_path / "ws" / "default" / sid / "runs.log"
        for _ in range(2000):  # the command has started once its line is in the file
            if log.exists() and log.read_text():
                break
            await asyncio.sleep(0.01)
        assert log.read_text().count(marker) == 1
        server.kill()
        stream.cancel()

    fake_model_thread.enqueue(TextReply("after the crash"))
    address = server.start()
    async with connect(address) as stub:
        state = await get_session(stub, sid)
        next_turn = await stream_turn(stub, sid, "What happened?")
    assert state.state == session_pb2.SESSION_STATE_IDLE
    assert last_of(next_turn, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    history = fake_model_thread.requests[-1].messages
    result = next(b for m in history for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    assert "may or may not have happened" in json.dumps(result)
    assert (tmp_path / "ws" / "default" / sid / "runs.log").read_text().count(marker) == 1
