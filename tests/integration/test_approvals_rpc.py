"""Tool approvals over gRPC (docs/protocol.md, "Tool approvals"): ResolveApproval and the RunSession command,
a remote before_tool_call host asking for approval, the Session fields, and every rejection naming its field."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import (
    approval_pb2,
    event_pb2,
    hook_pb2,
    hook_registration_pb2,
    hook_service_pb2,
    server_info_pb2,
    session_pb2,
)
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.integration.test_remote_hooks import ALLOW_LOOPBACK, Host, registration, serve
from tests.support.bidi import Bidi, lookup_tool, open_bidi
from tests.support.events import kinds, last_of
from tests.support.rpc import Stub, create_session, decode_error, decode_status, get_session, stream_turn

APPROVE = approval_pb2.APPROVAL_DECISION_APPROVE
DENY = approval_pb2.APPROVAL_DECISION_DENY
CODING = session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING)


@pytest.fixture
async def server(server_factory: ServerFactory) -> RunningServer:
    return await server_factory(ALLOW_LOOPBACK)


def policy(*entries: str) -> approval_pb2.ApprovalPolicy:
    return approval_pb2.ApprovalPolicy(entries=list(entries))


async def resolve(stub: Stub, sid: str, call_id: str, decision: int, **fields: Any) -> list[event_pb2.SessionEvent]:
    request = turn_api.ResolveApprovalRequest(session_id=sid, call_id=call_id, decision=decision, **fields)  # type: ignore[arg-type]
    return [r.event async for r in stub.ResolveApproval(request)]


async def suspended_write(stub: Stub, fake_model: FakeAnthropic) -> str:
    session = await create_session(stub, identity=CODING, approval_policy=policy("write"))
    sid = session.identity.session_id
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="w1", name="write", input={"path": "a.txt", "content": "x"})]),
        TextReply("written"),
    )
    events = await stream_turn(stub, sid, "write")
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    return sid


async def test_the_session_carries_its_policy_and_the_server_announces_approvals(stub: Stub) -> None:
    created = await create_session(stub, approval_policy=policy("mutating", "lookup"))
    empty = await create_session(stub, approval_policy=policy())
    unset = await create_session(stub)
    info = await stub.GetServerInfo(server_info_pb2.GetServerInfoRequest())
    assert list((await get_session(stub, created.identity.session_id)).approval_policy.entries) == [
        "mutating",
        "lookup",
    ]
    assert empty.HasField("approval_policy")
    assert not empty.approval_policy.entries
    assert not unset.HasField("approval_policy")
    assert "approvals" in info.capabilities


async def test_bad_answers_name_their_field_and_leave_the_call_pending(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await suspended_write(stub, fake_model)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"decision": approval_pb2.APPROVAL_DECISION_UNSPECIFIED}, "decision"),
        ({"decision": DENY, "edited_input_json": '{"path": "b"}'}, "edited_input"),
        ({"decision": APPROVE, "edited_input_json": "[1]"}, "edited_input_json"),
        ({"decision": APPROVE, "edited_input_json": '{"path": 7, "content": "x"}'}, "edited_input"),
    ]
    for fields, field in cases:
        request = turn_api.ResolveApprovalRequest(session_id=sid, call_id="w1", **fields)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            [r async for r in stub.ResolveApproval(request)]
        decoded = decode_error(error.value)
        assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT, fields
        assert [v[0] for v in decoded.field_violations] == [field], fields
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await resolve(stub, sid, "nope", APPROVE)
    assert decode_error(unknown.value).reason == "UNKNOWN_TOOL_CALL"
    with pytest.raises(grpc.aio.AioRpcError) as bad_policy:
        await create_session(stub, approval_policy=policy(" write"))
    assert [v[0] for v in decode_error(bad_policy.value).field_violations] == ["session.approval_policy.entries[0]"]
    assert list((await get_session(stub, sid)).pending_call_ids) == ["w1"]
    done = await resolve(stub, sid, "w1", APPROVE)
    assert last_of(done, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


async def test_a_hosted_call_needing_approval_is_exposed_only_once_approved(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    session = await create_session(stub, hosted_tools=[lookup_tool()], approval_policy=policy("lookup"))
    sid = session.identity.session_id
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="h1", name="lookup", input={"q": "x"})]), TextReply("done"))
    first = await stream_turn(stub, sid, "look it up")
    assert kinds(first)[-2:] == ["approval_requested", "run_finished"]
    early = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="h1", output_json='"too early"')
    with pytest.raises(grpc.aio.AioRpcError) as error:
        [r async for r in stub.SubmitHostedToolResult(early)]
    decoded = decode_error(error.value)
    assert (decoded.code, decoded.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "APPROVAL_PENDING")
    approved = await resolve(stub, sid, "h1", APPROVE, edited_input_json='{"q": "y"}')
    assert kinds(approved) == ["approval_resolved", "hosted_tool_call", "run_finished"]
    assert approved[1].hosted_tool_call.input_json == '{"q":"y"}'
    assert approved[0].approval_resolved.input_json == '{"q":"y"}'
    submit = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="h1", output_json='"found"')
    done = [r.event async for r in stub.SubmitHostedToolResult(submit)]
    assert last_of(done, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


async def test_run_session_answers_an_approval_as_a_command(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub, identity=CODING, approval_policy=policy("mutating"))
    sid = session.identity.session_id
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="w1", name="write", input={"path": "a.txt", "content": "x"})]),
        TextReply("refused, fine"),
    )
    bidi: Bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "write")
    started = await bidi.result("turn")
    await bidi.finished(started.run_id, terminal=False)
    asked = last_of(bidi.events(), "approval_requested")
    assert (asked.call_id, asked.tool_name, asked.title) == ("w1", "write", "Approve write?")
    bidi.send(resolve_approval=run_session_api.RunSessionResolveApproval(command_id="no", call_id="w1"))
    assert (await bidi.result("no")).status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    answer = run_session_api.RunSessionResolveApproval(command_id="deny", call_id="w1", decision=DENY, message="No.")
    bidi.send(resolve_approval=answer)
    assert (await bidi.result("deny")).status.code == 0
    finished = await bidi.finished(started.run_id)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert last_of(bidi.events(), "tool_error").error == "No."
    bidi.send(
        resolve_approval=run_session_api.RunSessionResolveApproval(command_id="again", call_id="w1", decision=APPROVE)
    )
    info = decode_status((await bidi.result("again")).status)
    assert info.reason == "TOOL_CALL_ALREADY_RESOLVED"
    bidi.close()
    await bidi.drain()


class ApprovalHost(Host):
    """A before_tool_call host that asks for approval of every call."""

    async def BeforeToolCall(self, request: Any, context: Any) -> hook_service_pb2.BeforeToolCallResponse:
        self.seen.append(f"before_tool_call:{request.event.tool_name}")
        ask = hook_pb2.BeforeToolCallResult(
            require_approval=approval_pb2.ToolApprovalRequest(
                title="Read this file?",
                description="It may hold secrets.",
                severity=approval_pb2.APPROVAL_SEVERITY_CRITICAL,
                timeout=duration_pb2.Duration(seconds=600),
                timeout_behavior=approval_pb2.APPROVAL_TIMEOUT_BEHAVIOR_DENY,
            )
        )
        return hook_service_pb2.BeforeToolCallResponse(result=ask)


async def test_a_remote_hook_asks_for_approval(
    stub: Stub, fake_model: FakeAnthropic, hosts: list[grpc.aio.Server]
) -> None:
    host = ApprovalHost("")
    hook_server, address = await serve(host)
    hosts.append(hook_server)
    await stub.RegisterHooks(
        hook_registration_pb2.RegisterHooksRequest(registration=registration("guard", address, "before_tool_call"))
    )
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="r1", name="read", input={"path": "x.txt"})]), TextReply("ok"))
    first = await stream_turn(stub, sid, "read x")
    asked = last_of(first, "approval_requested")
    assert (asked.title, asked.description, asked.severity, asked.requested_by) == (
        "Read this file?",
        "It may hold secrets.",
        approval_pb2.APPROVAL_SEVERITY_CRITICAL,
        "hook:guard",
    )
    assert asked.timeout_behavior == approval_pb2.APPROVAL_TIMEOUT_BEHAVIOR_DENY
    # The hook's 600 s timeout runs from the request: compared in nanoseconds with the approval's own event
    # (whole seconds from run_started failed once the request came a little later on a loaded machine).
    asked_at = next(e for e in first if e.WhichOneof("event") == "approval_requested").create_time
    assert 599 < (asked.deadline.ToNanoseconds() - asked_at.ToNanoseconds()) / 1e9 <= 601
    denied = await resolve(stub, sid, "r1", DENY)
    assert last_of(denied, "tool_error").error == "The user denied this tool call."
    assert host.seen == ["before_tool_call:read"]
