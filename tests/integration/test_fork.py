"""ForkSession (docs/protocol.md, sessions): a new session with the source's history and transcript up to the last
completed run at or before `at_sequence`; its own event log from 1; what is and is not copied; the workspace on request;
errors and idempotency."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, Reply, TextBlock, TextReply, ToolUseBlock, Usage
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, create_session, events_after, get_session, rpc_error, stream_turn, text_input
from tests.support.runs import start_hanging_run

LOOKUP_SCHEMA_JSON = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


@pytest.fixture
async def workspace_root(tmp_path: Path) -> Path:
    return tmp_path / "workspaces"


@pytest.fixture
async def ws_stub(server_factory: ServerFactory, workspace_root: Path) -> AsyncIterator[Stub]:
    """A server whose workspaces live under a known root (<root>/default/<session_id>/)."""
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(workspace_root)})
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel)


async def fork(stub: Stub, source: str, **fields: Any) -> session_pb2.Session:
    response = await stub.ForkSession(session_api.ForkSessionRequest(source_session_id=source, **fields))
    return response.session


async def history(stub: Stub, sid: str) -> list[Any]:
    return list(
        (await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid, page_size=1000))).entries
    )


def entry_bodies(entries: list[Any]) -> list[tuple[str, Any]]:
    """Entries by content only (sequence numbers and timestamps are the fork's own)."""
    return [(e.WhichOneof("entry"), getattr(e, e.WhichOneof("entry"))) for e in entries]


def plain(value: Any) -> Any:
    """A request's messages without cache_control markers (their position follows the newest message)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def lookup_tool() -> hosted_tool_pb2.HostedToolDefinition:
    return hosted_tool_pb2.HostedToolDefinition(
        name="lookup", description="ask the host", input_schema_json=LOOKUP_SCHEMA_JSON
    )


async def two_turn_source(stub: Stub, fake_model: FakeAnthropic, **session_fields: Any) -> tuple[str, list[Any]]:
    session = await create_session(
        stub,
        identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING, session_key="chat:fork"),
        system_prompt="You are the source.",
        model_ref="anthropic/claude-haiku-4-5",
        labels={"team": "a"},
        hosted_tools=[lookup_tool()],
        **session_fields,
    )
    sid = session.identity.session_id
    fake_model.enqueue(
        TextReply("first answer", usage=Usage(input_tokens=100, output_tokens=10)),
        TextReply("second answer", usage=Usage(input_tokens=200, output_tokens=20)),
    )
    first = await stream_turn(stub, sid, "first question")
    second = await stream_turn(stub, sid, "second question")
    assert last_of(second, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    return sid, first + second


async def test_fork_after_two_turns_copies_history_and_transcript(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, source_events = await two_turn_source(stub, fake_model)
    source = await get_session(stub, sid)
    source_entries = await history(stub, sid)
    forked = await fork(stub, sid)
    fid = forked.identity.session_id
    assert str(uuid.UUID(fid)) == fid
    assert fid != sid
    assert (forked.forked_from.session_id, forked.forked_from.at_sequence) == (sid, source.last_sequence)
    assert source.last_sequence == source_events[-1].sequence
    # Configuration is copied.
    assert forked.identity.mode == session_pb2.SESSION_MODE_CODING
    assert forked.system_prompt == "You are the source."
    assert forked.model_ref == "anthropic/claude-haiku-4-5"
    assert dict(forked.labels) == {"team": "a"}
    assert [t.name for t in forked.hosted_tools] == ["lookup"]
    # Durable state: history and usage snapshot copied; cumulative usage, events and stop flag not.
    assert forked.history_message_count == 4
    assert forked.state == session_pb2.SESSION_STATE_IDLE
    assert forked.last_sequence == 0
    assert forked.HasField("usage_snapshot")
    assert forked.usage_snapshot.used_input_tokens == source.usage_snapshot.used_input_tokens == 200
    assert source.cumulative_usage.input_tokens == 300
    assert forked.cumulative_usage == session_pb2.Usage()
    usage = await stub.GetUsage(session_api.GetUsageRequest(session_id=fid))
    assert usage.cumulative_usage == session_pb2.Usage()
    assert usage.usage_snapshot.used_input_tokens == 200
    # The transcript is copied.
    fork_entries = await history(stub, fid)
    assert entry_bodies(fork_entries) == entry_bodies(source_entries)
    assert [k for k, _ in entry_bodies(fork_entries)] == ["system_prompt", "message", "assistant"] * 2
    # The fork's first turn gives the model the source's conversation.
    fake_model.enqueue(TextReply("fork answer", usage=Usage(input_tokens=300, output_tokens=5)))
    fork_events = await stream_turn(stub, fid, "fork question")
    assert text_of(fork_events) == "fork answer"
    sent = fake_model.requests[-1].messages
    assert plain(sent[:3]) == plain(fake_model.requests[1].messages)
    assert plain(sent[3:]) == [
        {"role": "assistant", "content": [{"type": "text", "text": "second answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "fork question"}]},
    ]
    # The fork's event log starts at 1 and holds only its own events.
    assert fork_events[0].sequence == 1
    assert all(e.session_id == fid for e in fork_events)
    after = await get_session(stub, fid)
    log = await events_after(stub, fid, 0, after.last_sequence)
    assert log[0] == fork_events[0]
    assert {e.run_id for e in log} == {fork_events[0].run_id}
    assert kinds(log) == kinds(fork_events)
    assert text_of(log) == "fork answer"
    assert log[-1] == fork_events[-1]
    assert after.cumulative_usage.input_tokens == 300
    assert after.history_message_count == 6
    # The source is untouched.
    again = await get_session(stub, sid)
    assert (again.last_sequence, again.history_message_count) == (source.last_sequence, 4)
    assert entry_bodies(await history(stub, sid)) == entry_bodies(source_entries)


async def test_fork_overrides_and_given_identity(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, _ = await two_turn_source(stub, fake_model)
    forked = await fork(
        stub,
        sid,
        identity=session_pb2.SessionIdentity(
            mode=session_pb2.SESSION_MODE_GENERAL, session_id="my-fork", session_key="chat:other"
        ),
        overrides=session_pb2.SessionOverrides(system_prompt="You are the fork.", model_ref="claude-sonnet-4-6"),
    )
    assert forked.identity == session_pb2.SessionIdentity(
        mode=session_pb2.SESSION_MODE_GENERAL, session_id="my-fork", session_key="chat:other"
    )
    assert (forked.system_prompt, forked.model_ref) == ("You are the fork.", "claude-sonnet-4-6")
    assert (await get_session(stub, "my-fork")).system_prompt == "You are the fork."
    fake_model.enqueue(TextReply("from the fork"))
    await stream_turn(stub, "my-fork", "hello fork")
    request = fake_model.requests[-1]
    assert request.system_text == "You are the fork."
    assert request.model == "claude-sonnet-4-6"
    assert len(request.messages) == 5
    # The source keeps its own settings.
    source = await get_session(stub, sid)
    assert (source.system_prompt, source.model_ref) == ("You are the source.", "anthropic/claude-haiku-4-5")


async def test_fork_with_only_an_id_keeps_the_source_mode(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, _ = await two_turn_source(stub, fake_model)
    forked = await fork(stub, sid, identity=session_pb2.SessionIdentity(session_id="named-fork"))
    assert forked.identity.session_id == "named-fork"
    assert forked.identity.mode == session_pb2.SESSION_MODE_CODING


async def test_fork_at_a_sequence_between_the_runs(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, events = await two_turn_source(stub, fake_model)
    first_end = next(e for e in events if e.WhichOneof("event") == "run_finished")
    second_start = [e for e in events if e.WhichOneof("event") == "run_started"][1]
    source_entries = await history(stub, sid)
    # Any cursor from the first run's end up to the second run's last event before its run_finished.
    for at in (first_end.sequence, second_start.sequence, events[-1].sequence - 1):
        forked = await fork(stub, sid, at_sequence=at)
        assert forked.forked_from.at_sequence == first_end.sequence, at
        assert forked.history_message_count == 2, at
        assert entry_bodies(await history(stub, forked.identity.session_id)) == entry_bodies(source_entries[:3])
    fake_model.enqueue(TextReply("branch"))
    await stream_turn(stub, forked.identity.session_id, "another second question")
    assert plain(fake_model.requests[-1].messages) == [
        {"role": "user", "content": [{"type": "text", "text": "first question"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "another second question"}]},
    ]
    # Before any completed run: an empty conversation.
    empty = await fork(stub, sid, at_sequence=first_end.sequence - 1)
    assert empty.history_message_count == 0
    assert await history(stub, empty.identity.session_id) == []


async def test_fork_of_a_suspended_session_stops_at_the_last_completed_run(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub, hosted_tools=[lookup_tool()])).identity.session_id
    fake_model.enqueue(
        TextReply("done one"),
        Reply(blocks=[TextBlock("Let me ask."), ToolUseBlock(id="toolu_p", name="lookup", input={"q": "x"})]),
    )
    first = await stream_turn(stub, sid, "one")
    suspended = await stream_turn(stub, sid, "two")
    assert last_of(suspended, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    forked = await fork(stub, sid)
    fid = forked.identity.session_id
    assert forked.forked_from.at_sequence == first[-1].sequence
    assert forked.history_message_count == 2
    assert forked.state == session_pb2.SESSION_STATE_IDLE
    assert list(forked.pending_call_ids) == []
    assert forked.active_run_id == ""
    fork_kinds = [k for k, _ in entry_bodies(await history(stub, fid))]
    assert fork_kinds == ["system_prompt", "message", "assistant"]
    fake_model.enqueue(TextReply("fork ok"))
    await stream_turn(stub, fid, "three")
    sent = fake_model.requests[-1].messages
    assert all(block.get("type") == "text" for message in sent for block in message["content"])
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    # The source is still suspended and resumable.
    source = await get_session(stub, sid)
    assert source.state == session_pb2.SESSION_STATE_SUSPENDED
    fake_model.enqueue(TextReply("source continues"))
    submitted = [
        r.event
        async for r in stub.SubmitHostedToolResult(
            turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_p", output_json='"x"')
        )
    ]
    assert last_of(submitted, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


async def test_fork_while_a_run_is_in_flight(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("done one"))
    first = await stream_turn(stub, sid, "one")
    running = await start_hanging_run(stub, fake_model, sid, "two")
    forked = await asyncio.wait_for(fork(stub, sid), 10)
    assert forked.forked_from.at_sequence == first[-1].sequence
    assert forked.history_message_count == 2
    assert [k for k, _ in entry_bodies(await history(stub, forked.identity.session_id))] == [
        "system_prompt",
        "message",
        "assistant",
    ]
    running.reply.release()
    rest = await running.rest()
    assert last_of(rest, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


async def test_fork_copies_the_workspace_only_when_asked(
    ws_stub: Stub, workspace_root: Path, fake_model: FakeAnthropic
) -> None:
    stub = ws_stub
    sid = (
        await create_session(stub, identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING))
    ).identity.session_id
    source_ws = workspace_root / "default" / sid
    (source_ws / "notes").mkdir(parents=True)
    (source_ws / "notes" / "plan.txt").write_text("step one\nstep two\n")
    fake_model.enqueue(TextReply("ok"))
    await stream_turn(stub, sid, "hello")
    copied = await fork(stub, sid, copy_workspace=True)
    cid = copied.identity.session_id
    assert (workspace_root / "default" / cid / "notes" / "plan.txt").read_text() == "step one\nstep two\n"
    plain_fork = await fork(stub, sid)
    assert not (workspace_root / "default" / plain_fork.identity.session_id / "notes" / "plan.txt").exists()
    # The fork's own tools see the copy; changing it does not touch the source.
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="toolu_r", name="read", input={"path": "notes/plan.txt"})]),
        TextReply("read it"),
    )
    events = await stream_turn(stub, cid, "read the plan")
    assert kinds(events)[:4] == ["run_started", "usage_snapshot", "tool_call", "tool_result"]
    assert "step two" in last_of(events, "tool_result").output[0].text.text
    (workspace_root / "default" / cid / "notes" / "plan.txt").write_text("changed")
    assert (source_ws / "notes" / "plan.txt").read_text() == "step one\nstep two\n"


async def test_fork_errors(stub: Stub, fake_model: FakeAnthropic) -> None:
    error = await rpc_error(stub.ForkSession(session_api.ForkSessionRequest(source_session_id="missing-source")))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    sid = (await create_session(stub)).identity.session_id
    other = (await create_session(stub, identity=session_pb2.SessionIdentity(session_id="taken"))).identity
    for target in (other.session_id, sid):
        error = await rpc_error(
            stub.ForkSession(
                session_api.ForkSessionRequest(
                    source_session_id=sid, identity=session_pb2.SessionIdentity(session_id=target)
                )
            )
        )
        assert (error.code, error.reason) == (grpc.StatusCode.ALREADY_EXISTS, "SESSION_ALREADY_EXISTS"), target
    error = await rpc_error(stub.ForkSession(session_api.ForkSessionRequest(source_session_id="")))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    listed = await stub.ListSessions(session_api.ListSessionsRequest())
    assert sorted(s.identity.session_id for s in listed.sessions) == sorted([sid, "taken"])


async def test_fork_is_idempotent_with_request_id(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, _ = await two_turn_source(stub, fake_model)
    first = await fork(stub, sid, request_id="fork-once")
    again = await fork(stub, sid, request_id="fork-once")
    assert again.identity.session_id == first.identity.session_id
    assert again.forked_from == first.forked_from
    listed = await stub.ListSessions(session_api.ListSessionsRequest())
    assert len(listed.sessions) == 2
    error = await rpc_error(
        stub.ForkSession(
            session_api.ForkSessionRequest(source_session_id=sid, request_id="fork-once", copy_workspace=True)
        )
    )
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")
    # Without a request_id every call is a new fork.
    third = await fork(stub, sid)
    assert third.identity.session_id != first.identity.session_id


async def test_fork_does_not_copy_the_stop_flag(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, _ = await two_turn_source(stub, fake_model)
    await stub.RequestStop(turn_api.RequestStopRequest(session_id=sid))
    forked = await fork(stub, sid)
    assert forked.stop_requested is False
    fake_model.enqueue(TextReply("not stopped"))
    events = await stream_turn(stub, forked.identity.session_id, "go")
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert (await get_session(stub, sid)).stop_requested is True


async def test_fork_does_not_copy_the_in_memory_api_key(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory({"ANTHROPIC_API_KEY": ""})
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub: Stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        sid = (await create_session(stub, api_key="sk-ant-source-only-1234")).identity.session_id
        fake_model.enqueue(TextReply("source ok"))
        await stream_turn(stub, sid, "hi")
        keyless = await fork(stub, sid)
        error = await rpc_error(
            stub.StreamTurn(turn_api.StreamTurnRequest(session_id=keyless.identity.session_id, input=text_input("hi")))
        )
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_API_KEY")
        keyed = await fork(stub, sid, overrides=session_pb2.SessionOverrides(api_key="sk-ant-fork-key-5678"))
        fake_model.enqueue(TextReply("fork ok"))
        await stream_turn(stub, keyed.identity.session_id, "hi")
        assert fake_model.requests[-1].api_key == "sk-ant-fork-key-5678"
        assert len(fake_model.requests) == 2


async def test_fork_after_a_reset_copies_the_state_after_it(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, events = await two_turn_source(stub, fake_model)
    before_reset = events[-1].sequence
    await stub.ResetSession(session_api.ResetSessionRequest(session_id=sid, reason="new topic"))
    source_entries = await history(stub, sid)
    assert source_entries[-1].WhichOneof("entry") == "session_reset"

    # The latest state: no history, the transcript up to and including the reset, no usage inherited.
    latest = await fork(stub, sid)
    assert latest.history_message_count == 0
    assert not latest.HasField("usage_snapshot")
    assert entry_bodies(await history(stub, latest.identity.session_id)) == entry_bodies(source_entries)

    # A point before the reset: that history is gone, and the error says so.
    error = await rpc_error(
        stub.ForkSession(session_api.ForkSessionRequest(source_session_id=sid, at_sequence=before_reset))
    )
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violations[0][0] == "at_sequence"

    # After a turn past the reset, a fork carries only that turn.
    fake_model.enqueue(TextReply("fresh answer"))
    await stream_turn(stub, sid, "fresh question")
    after = await fork(stub, sid)
    assert after.history_message_count == 2
    fake_model.enqueue(TextReply("ok"))
    await stream_turn(stub, after.identity.session_id, "and then?")
    assert [m["role"] for m in fake_model.requests[-1].messages] == ["user", "assistant", "user"]
    assert fake_model.requests[-1].messages[0]["content"][0]["text"] == "fresh question"
