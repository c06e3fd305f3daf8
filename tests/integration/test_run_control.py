"""Run control (docs/protocol.md, "Stop, cancel, disconnect" and busy policies): the sticky stop flag, CancelRun,
steering with InjectMessage, and the busy policies of StreamTurn (REJECT, ENQUEUE, INTERRUPT, STEER)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from general_agent_server.domain.events import RunFinished
from general_agent_server.domain.transcript import MessageEntry
from general_agent_server.sessions.live import LiveSession
from tests.conftest import ServerFactory
from tests.support.events import RESULT_THEN_INJECTED, TEXT_RUN, TEXT_THEN_INJECTED, kinds, last_of, sequences, text_of
from tests.support.rpc import (
    Stub,
    connect,
    create_session,
    events_after,
    get_session,
    read_until,
    rpc_error,
    stream_turn,
    text_input,
    watch_until_terminal,
)
from tests.support.runs import hang, start_hanging_run

LOOKUP = hosted_tool_pb2.HostedToolDefinition(
    name="lookup",
    description="Ask the host",
    input_schema_json='{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}',
)


def options(policy: int) -> turn_api.TurnOptions:
    return turn_api.TurnOptions(busy_policy=policy)  # type: ignore[arg-type]


def start_turn(stub: Stub, sid: str, text: str, policy: int = turn_api.BUSY_POLICY_UNSPECIFIED) -> Any:
    return stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input(text), options=options(policy)))


async def drain(call: Any) -> list[Any]:
    return [response.event async for response in call]


async def wait_until(condition: Callable[[], Any], what: str) -> None:
    """Polls a condition (bounded); never a timing assertion."""
    for _ in range(1000):
        if await condition() if asyncio.iscoroutinefunction(condition) else condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting until {what}")


async def transcript(stub: Stub, sid: str) -> list[Any]:
    return list((await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))).entries)


async def user_messages(stub: Stub, sid: str) -> list[tuple[str, bool]]:
    return [
        (e.message.content[0].text.text, e.message.injected)
        for e in await transcript(stub, sid)
        if e.WhichOneof("entry") == "message"
    ]


def actor_of(server: RunningServer, sid: str) -> LiveSession:
    actor = server.agent.cache.peek("default", sid)
    assert actor is not None
    return actor


def queued(server: RunningServer, sid: str) -> int:
    return actor_of(server, sid).queued_turns


async def suspended_session(stub: Stub, fake_model: FakeAnthropic) -> tuple[str, list[Any]]:
    sid = (await create_session(stub, hosted_tools=[LOOKUP])).identity.session_id
    fake_model.enqueue(
        Reply(blocks=[TextBlock("Asking."), ToolUseBlock(id="toolu_h", name="lookup", input={"q": "x"})])
    )
    events = await stream_turn(stub, sid, "question")
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    return sid, events


def outcome(events: list[Any]) -> tuple[int, int]:
    finished = last_of(events, "run_finished")
    return finished.outcome, finished.reason


STOPPED_BY_REQUEST = (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_STOP_REQUESTED)
COMPLETED = (event_pb2.RUN_OUTCOME_COMPLETED, event_pb2.RUN_REASON_UNSPECIFIED)


# ---------------------------------------------------------------------------------------------- stop


async def test_request_stop_during_a_model_call_is_sticky_until_cleared(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    run = await start_hanging_run(stub, fake_model, sid)
    stop = await stub.RequestStop(turn_api.RequestStopRequest(session_id=sid))
    assert stop.run_id == run.run_id
    events = run.seen + await run.rest()
    assert kinds(events) == ["run_started", "assistant_delta", "turn_complete", "run_finished"]
    assert last_of(events, "turn_complete").stop_reason == event_pb2.STOP_REASON_ABORTED
    assert outcome(events) == STOPPED_BY_REQUEST
    assert await fake_model.requests[0].disconnected.wait(timeout=5)
    session = await get_session(stub, sid)
    assert (session.state, session.stop_requested, session.active_run_id) == (
        session_pb2.SESSION_STATE_IDLE,
        True,
        "",
    )

    # The flag is sticky: the next turn stops at once and never reaches the model.
    stopped = await stream_turn(stub, sid, "ignored while stopped")
    assert kinds(stopped) == ["run_started", "turn_complete", "run_finished"]
    assert stopped[1].turn_complete.stop_reason == event_pb2.STOP_REASON_STOP_REQUESTED
    assert outcome(stopped) == STOPPED_BY_REQUEST
    assert stopped[2].run_finished.stop_reason == event_pb2.STOP_REASON_STOP_REQUESTED
    assert len(fake_model.requests) == 1
    assert await user_messages(stub, sid) == [("long task", False), ("ignored while stopped", False)]

    assert (await stub.ClearStop(turn_api.ClearStopRequest(session_id=sid))).was_set is True
    assert (await stub.ClearStop(turn_api.ClearStopRequest(session_id=sid))).was_set is False
    assert (await get_session(stub, sid)).stop_requested is False
    fake_model.enqueue(TextReply("back"))
    events = await stream_turn(stub, sid, "after clear")
    assert kinds(events) == TEXT_RUN
    assert outcome(events) == COMPLETED
    # Neither the aborted partial answer nor the message sent while stopped reached the model history.
    assert fake_model.requests[1].messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "long task"},
                {"type": "text", "text": "after clear", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]
    aborted = [(e.assistant.text, e.assistant.aborted) for e in await transcript(stub, sid) if e.HasField("assistant")]
    assert aborted == [("partial ", True), ("back", False)]


async def test_request_stop_on_an_idle_session_only_sets_the_flag(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    before = await get_session(stub, sid)
    assert (await stub.RequestStop(turn_api.RequestStopRequest(session_id=sid))).run_id == ""
    after = await get_session(stub, sid)
    assert (after.stop_requested, after.last_sequence) == (True, before.last_sequence)


async def test_request_stop_while_suspended_resolves_the_pending_calls(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, suspended = await suspended_session(stub, fake_model)
    stop = await stub.RequestStop(turn_api.RequestStopRequest(session_id=sid))
    assert stop.run_id == suspended[0].run_id
    log = await watch_until_terminal(stub, sid, suspended[-1].sequence)
    assert kinds(log) == ["tool_error", "turn_complete", "run_finished"]
    assert all(e.run_id == suspended[0].run_id for e in log)
    assert (log[0].tool_error.call_id, log[0].tool_error.error) == ("toolu_h", "cancelled: run stopped")
    assert outcome(log) == STOPPED_BY_REQUEST
    session = await get_session(stub, sid)
    assert (session.state, list(session.pending_call_ids), session.stop_requested) == (
        session_pb2.SESSION_STATE_IDLE,
        [],
        True,
    )
    late = await rpc_error(
        stub.SubmitHostedToolResult(
            turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_h", error="x")
        )
    )
    assert (late.reason, late.metadata["resolved_by"]) == ("TOOL_CALL_ALREADY_RESOLVED", "STOP")

    await stub.ClearStop(turn_api.ClearStopRequest(session_id=sid))
    fake_model.enqueue(TextReply("fine"))
    events = await stream_turn(stub, sid, "next")
    assert outcome(events) == COMPLETED
    # The history stayed valid: the tool_use has its (error) result before the next user text.
    messages = fake_model.requests[1].messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_h", "content": "cancelled: run stopped", "is_error": True},
        {"type": "text", "text": "next", "cache_control": {"type": "ephemeral"}},
    ]


async def test_cancel_run_during_a_model_call_is_not_sticky(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    run = await start_hanging_run(stub, fake_model, sid)
    cancelled = await stub.CancelRun(turn_api.CancelRunRequest(session_id=sid, run_id=run.run_id))
    assert (cancelled.cancelled, cancelled.run_id) == (True, run.run_id)
    events = run.seen + await run.rest()
    assert kinds(events) == ["run_started", "assistant_delta", "turn_complete", "run_finished"]
    assert last_of(events, "turn_complete").stop_reason == event_pb2.STOP_REASON_ABORTED
    assert outcome(events) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
    session = await get_session(stub, sid)
    assert (session.state, session.stop_requested) == (session_pb2.SESSION_STATE_IDLE, False)
    fake_model.enqueue(TextReply("next works"))
    events = await stream_turn(stub, sid, "again")
    assert (kinds(events), text_of(events), outcome(events)) == (TEXT_RUN, "next works", COMPLETED)


async def test_cancel_run_of_a_run_that_is_not_active(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    idle = await stub.CancelRun(turn_api.CancelRunRequest(session_id=sid))
    assert (idle.cancelled, idle.run_id) == (False, "")
    run = await start_hanging_run(stub, fake_model, sid)
    other = await stub.CancelRun(turn_api.CancelRunRequest(session_id=sid, run_id="some-other-run"))
    assert (other.cancelled, other.run_id) == (False, "")
    run.reply.release()
    events = run.seen + await run.rest()
    assert outcome(events) == COMPLETED
    assert text_of(events) == "partial rest"
    finished = await stub.CancelRun(turn_api.CancelRunRequest(session_id=sid, run_id=run.run_id))
    assert finished.cancelled is False


# ---------------------------------------------------------------------------------------------- inject


async def test_inject_on_an_idle_session_is_not_accepted(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    await stream_turn(stub, sid, "hello")
    before = await get_session(stub, sid)
    entries = await transcript(stub, sid)
    response = await stub.InjectMessage(turn_api.InjectMessageRequest(session_id=sid, input=text_input("late")))
    assert (response.accepted, response.run_id) == (False, "")
    after = await get_session(stub, sid)
    assert (after.last_sequence, after.history_message_count) == (before.last_sequence, before.history_message_count)
    assert await transcript(stub, sid) == entries


async def test_inject_while_running_makes_one_more_model_call(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    run = await start_hanging_run(stub, fake_model, sid, then=[TextReply("Also mentioning X.")])
    response = await stub.InjectMessage(turn_api.InjectMessageRequest(session_id=sid, input=text_input("mention X")))
    assert (response.accepted, response.run_id) == (True, run.run_id)
    assert await user_messages(stub, sid) == [("long task", False), ("mention X", True)]
    run.reply.release()
    events = run.seen + await run.rest()
    assert kinds(events) == TEXT_THEN_INJECTED
    assert [p.text.text for p in last_of(events, "message_injected").input] == ["mention X"]
    assert [e.turn_complete.stop_reason for e in events if e.HasField("turn_complete")] == [
        event_pb2.STOP_REASON_STOP,
        event_pb2.STOP_REASON_STOP,
    ]
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.usage.model_calls) == (event_pb2.RUN_OUTCOME_COMPLETED, 2)
    assert len(fake_model.requests) == 2
    assert fake_model.requests[1].messages == [
        {"role": "user", "content": [{"type": "text", "text": "long task"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "partial rest"}]},
        {"role": "user", "content": [{"type": "text", "text": "mention X", "cache_control": {"type": "ephemeral"}}]},
    ]


async def test_inject_while_suspended_follows_the_tool_results(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, suspended = await suspended_session(stub, fake_model)
    response = await stub.InjectMessage(turn_api.InjectMessageRequest(session_id=sid, input=text_input("be quick")))
    assert (response.accepted, response.run_id) == (True, suspended[0].run_id)
    fake_model.enqueue(TextReply("Quick answer."))
    request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_h", output_json='"42"')
    events = [r.event async for r in stub.SubmitHostedToolResult(request)]
    assert kinds(events) == RESULT_THEN_INJECTED
    assert fake_model.requests[1].messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_h", "content": "42"},
        {"type": "text", "text": "be quick", "cache_control": {"type": "ephemeral"}},
    ]


# ---------------------------------------------------------------------------------------------- busy policies


async def test_reject_is_the_default_while_running_and_suspended(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, suspended = await suspended_session(stub, fake_model)
    before = await get_session(stub, sid)
    for policy in (turn_api.BUSY_POLICY_UNSPECIFIED, turn_api.BUSY_POLICY_REJECT):
        error = await rpc_error(start_turn(stub, sid, "me too", policy))
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
        assert error.metadata == {"active_run_id": suspended[0].run_id, "state": "SUSPENDED"}
    after = await get_session(stub, sid)
    assert (after.last_sequence, after.state) == (before.last_sequence, session_pb2.SESSION_STATE_SUSPENDED)
    assert await user_messages(stub, sid) == [("question", False)]


async def test_enqueue_waits_for_the_running_turn(stub: Stub, server: RunningServer, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    reply = hang()
    fake_model.enqueue(reply, TextReply("second answer"))
    first = start_turn(stub, sid, "first")
    seen = await read_until(first, "assistant_delta")
    second = asyncio.create_task(drain(start_turn(stub, sid, "second", turn_api.BUSY_POLICY_ENQUEUE)))
    await wait_until(lambda: queued(server, sid) == 1, "the second turn is queued")
    # Nothing is written for a queued turn.
    assert await user_messages(stub, sid) == [("first", False)]
    assert (await get_session(stub, sid)).history_message_count == 1
    assert not second.done()
    reply.release()
    first_events = seen + await drain(first)
    second_events = await asyncio.wait_for(second, 10)
    assert outcome(first_events) == COMPLETED
    assert kinds(second_events) == TEXT_RUN
    assert outcome(second_events) == COMPLETED
    assert second_events[0].run_started.trigger == event_pb2.RUN_TRIGGER_ENQUEUED_TURN
    assert second_events[0].run_id != first_events[0].run_id
    assert second_events[0].sequence > first_events[-1].sequence
    assert fake_model.requests[1].messages == [
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "partial rest"}]},
        {"role": "user", "content": [{"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}]},
    ]
    # On an idle session ENQUEUE is an ordinary turn.
    idle_turn = await drain(start_turn(stub, sid, "third", turn_api.BUSY_POLICY_ENQUEUE))
    assert idle_turn[0].run_started.trigger == event_pb2.RUN_TRIGGER_TURN
    assert queued(server, sid) == 0


async def test_enqueue_caller_disconnect_leaves_the_queue(
    stub: Stub, server: RunningServer, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub)).identity.session_id
    reply = hang()
    fake_model.enqueue(reply)
    first = start_turn(stub, sid, "first")
    seen = await read_until(first, "assistant_delta")
    second = start_turn(stub, sid, "second", turn_api.BUSY_POLICY_ENQUEUE)
    waiter = asyncio.create_task(drain(second))
    await wait_until(lambda: queued(server, sid) == 1, "the second turn is queued")
    second.cancel()
    await wait_until(lambda: queued(server, sid) == 0, "the abandoned turn left the queue")
    reply.release()
    assert outcome(seen + await drain(first)) == COMPLETED
    await asyncio.gather(waiter, return_exceptions=True)
    await wait_until(lambda: actor_of(server, sid).run is None, "the session is idle")
    assert len(fake_model.requests) == 1
    assert await user_messages(stub, sid) == [("first", False)]


async def test_enqueue_queue_limit(server_factory: ServerFactory, fake_model: FakeAnthropic) -> None:
    server = await server_factory({"GENERAL_AGENT_MAX_QUEUED_TURNS": "1"})
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        reply = hang()
        fake_model.enqueue(reply, TextReply("second answer"))
        first = start_turn(stub, sid, "first")
        seen = await read_until(first, "assistant_delta")
        second = asyncio.create_task(drain(start_turn(stub, sid, "second", turn_api.BUSY_POLICY_ENQUEUE)))
        await wait_until(lambda: queued(server, sid) == 1, "the second turn is queued")
        error = await rpc_error(start_turn(stub, sid, "third", turn_api.BUSY_POLICY_ENQUEUE))
        assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_LIMIT")
        assert error.metadata["limit"] == "max_queued_turns"
        assert error.retry_delay is not None
        reply.release()
        assert outcome(seen + await drain(first)) == COMPLETED
        second_events = await asyncio.wait_for(second, 10)
        assert outcome(second_events) == COMPLETED
        assert [text for text, _ in await user_messages(stub, sid)] == ["first", "second"]


async def test_interrupt_supersedes_the_running_turn(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    first = await start_hanging_run(stub, fake_model, sid, "first", then=[TextReply("new answer")])
    second = await drain(start_turn(stub, sid, "second", turn_api.BUSY_POLICY_INTERRUPT))
    first_events = first.seen + await first.rest()
    assert kinds(first_events) == ["run_started", "assistant_delta", "turn_complete", "run_finished"]
    assert last_of(first_events, "turn_complete").stop_reason == event_pb2.STOP_REASON_ABORTED
    assert outcome(first_events) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_SUPERSEDED)
    assert kinds(second) == TEXT_RUN
    assert outcome(second) == COMPLETED
    assert second[0].run_started.trigger == event_pb2.RUN_TRIGGER_TURN
    assert second[0].sequence > first_events[-1].sequence
    assert fake_model.requests[1].messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]


async def test_interrupt_while_suspended_supersedes_the_pending_calls(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, suspended = await suspended_session(stub, fake_model)
    fake_model.enqueue(TextReply("new answer"))
    second = await drain(start_turn(stub, sid, "second", turn_api.BUSY_POLICY_INTERRUPT))
    assert kinds(second) == TEXT_RUN
    assert outcome(second) == COMPLETED
    log = await watch_until_terminal(stub, sid, suspended[-1].sequence)
    assert kinds(log) == ["tool_error", "turn_complete", "run_finished"]
    assert all(e.run_id == suspended[0].run_id for e in log)
    assert log[0].tool_error.error == "superseded by a new turn"
    assert outcome(log) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_SUPERSEDED)
    assert log[-1].sequence < second[0].sequence
    late = await rpc_error(
        stub.SubmitHostedToolResult(
            turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_h", error="x")
        )
    )
    assert (late.reason, late.metadata["resolved_by"]) == ("TOOL_CALL_ALREADY_RESOLVED", "SUPERSEDED")
    assert fake_model.requests[1].messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_h", "content": "superseded by a new turn", "is_error": True},
        {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}},
    ]


async def test_steer_follows_the_running_run(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    first = await start_hanging_run(stub, fake_model, sid, then=[TextReply("Focused on Y.")])
    steer = asyncio.create_task(drain(start_turn(stub, sid, "focus on Y", turn_api.BUSY_POLICY_STEER)))

    async def injected() -> bool:
        return ("focus on Y", True) in await user_messages(stub, sid)

    await wait_until(injected, "the steering message is committed")
    first.reply.release()
    first_events = first.seen + await first.rest()
    steered = await asyncio.wait_for(steer, 10)
    run_id = first_events[0].run_id
    assert all(e.run_id == run_id for e in steered)
    assert "run_started" not in kinds(steered)
    assert kinds(steered)[-5:] == [
        "message_injected",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    assert [p.text.text for p in last_of(steered, "message_injected").input] == ["focus on Y"]
    assert steered[-1] == first_events[-1]
    assert outcome(steered) == COMPLETED
    assert sequences(steered) == sorted(set(sequences(steered)))
    assert fake_model.requests[1].messages[-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "focus on Y", "cache_control": {"type": "ephemeral"}}],
    }
    # On an idle session STEER starts a normal run.
    fake_model.enqueue(TextReply("fresh"))
    fresh = await drain(start_turn(stub, sid, "new topic", turn_api.BUSY_POLICY_STEER))
    assert kinds(fresh) == TEXT_RUN
    assert fresh[0].run_started.trigger == event_pb2.RUN_TRIGGER_STEER


async def test_steer_while_suspended_is_consumed_at_the_continuation(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, suspended = await suspended_session(stub, fake_model)
    steer = asyncio.create_task(drain(start_turn(stub, sid, "be brief", turn_api.BUSY_POLICY_STEER)))

    async def injected() -> bool:
        return ("be brief", True) in await user_messages(stub, sid)

    await wait_until(injected, "the steering message is committed")
    assert not steer.done()
    fake_model.enqueue(TextReply("Brief."))
    request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_h", output_json='"data"')
    submitted = [r.event async for r in stub.SubmitHostedToolResult(request)]
    steered = await asyncio.wait_for(steer, 10)
    assert kinds(steered) == kinds(submitted) == RESULT_THEN_INJECTED
    assert all(e.run_id == suspended[0].run_id for e in steered)
    assert steered[-1] == submitted[-1]
    assert fake_model.requests[1].messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_h", "content": "data"},
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}},
    ]


async def test_commands_during_a_busy_run_never_conflict_with_its_commits(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    """InjectMessage commits from the command side while the run commits its own steps: neither may lose
    the other's write (a version conflict would fail the RPC or the run)."""
    sid = (await create_session(stub)).identity.session_id
    rounds = 25
    fake_model.enqueue(*(Reply(blocks=[ToolUseBlock(id=f"toolu_{i}", name="nope", input={})]) for i in range(rounds)))
    fake_model.default_reply = TextReply("done")
    call = start_turn(stub, sid, "busy run")
    started = await read_until(call, "run_started")
    accepted: list[str] = []
    failures: list[BaseException] = []
    finished = asyncio.Event()

    async def inject_while_running() -> None:
        index = 0
        # Until the last tool round: every accepted message must still reach the model before the end.
        while not finished.is_set() and len(fake_model.requests) < rounds:
            text = f"note {index}"
            try:
                response = await stub.InjectMessage(
                    turn_api.InjectMessageRequest(session_id=sid, input=text_input(text))
                )
                if response.accepted:
                    assert response.run_id == started[0].run_id
                    accepted.append(text)
            except grpc.aio.AioRpcError as error:
                failures.append(error)
            index += 1

    injector = asyncio.create_task(inject_while_running())
    events = started + await drain(call)
    finished.set()
    await injector
    assert failures == []
    assert outcome(events) == COMPLETED
    assert last_of(events, "run_finished").usage.model_calls >= rounds + 1
    assert accepted
    # Every accepted injection reached the model: the final request carries them all, once, in order.
    sent = [
        block["text"]
        for message in fake_model.requests[-1].messages
        if message["role"] == "user"
        for block in message["content"]
        if block.get("type") == "text" and block["text"].startswith("note ")
    ]
    assert sent == accepted
    session = await get_session(stub, sid)
    assert (session.state, session.last_sequence) == (session_pb2.SESSION_STATE_IDLE, events[-1].sequence)


class WriteGate:
    """Holds the store writes that match until opened: makes a commit slow at a chosen step, so a race
    with it is deterministic."""

    def __init__(self, server: RunningServer, monkeypatch: pytest.MonkeyPatch, matches: Callable[[Any], bool]):
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()
        real = server.store.write

        async def write(batch: Any, *args: Any, **kwargs: Any) -> Any:
            if matches(batch) and not self.opened.is_set():
                self.reached.set()
                await self.opened.wait()
            return await real(batch, *args, **kwargs)

        monkeypatch.setattr(server.store, "write", write)


def injects(batch: Any) -> bool:
    return any(isinstance(e.body, MessageEntry) and e.body.injected for e in batch.transcript)


def ends_a_run(batch: Any) -> bool:
    return any(isinstance(e.body, RunFinished) and e.body.terminal for e in batch.events)


async def commit_waiters(actor: LiveSession) -> None:
    """Polls (bounded) until some commit waits behind the one in flight; proceeds anyway after the bound."""
    for _ in range(400):
        if actor.ledger.commits_waiting:
            return
        await asyncio.sleep(0.005)


async def test_injection_committed_while_the_run_ends_is_still_delivered(
    stub: Stub, server: RunningServer, fake_model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await create_session(stub)).identity.session_id
    reply = hang()
    fake_model.enqueue(reply, TextReply("Noted."))
    call = start_turn(stub, sid, "long task")
    seen = await read_until(call, "assistant_delta")
    gate = WriteGate(server, monkeypatch, injects)
    inject = asyncio.ensure_future(
        stub.InjectMessage(turn_api.InjectMessageRequest(session_id=sid, input=text_input("one more thing")))
    )
    await asyncio.wait_for(gate.reached.wait(), 10)
    # The model ends its turn while the injection is being committed: the run's end must wait for it.
    reply.release()
    assert await fake_model.requests[0].completed.wait(timeout=5)
    await commit_waiters(actor_of(server, sid))
    gate.opened.set()
    response = await asyncio.wait_for(inject, 10)
    assert (response.accepted, response.run_id) == (True, seen[0].run_id)
    events = seen + await drain(call)
    assert kinds(events) == TEXT_THEN_INJECTED
    assert sequences(events) == sorted(set(sequences(events)))
    assert outcome(events) == COMPLETED
    assert fake_model.requests[1].messages[-1]["content"] == [
        {"type": "text", "text": "one more thing", "cache_control": {"type": "ephemeral"}}
    ]
    session = await get_session(stub, sid)
    assert (session.state, session.last_sequence) == (session_pb2.SESSION_STATE_IDLE, events[-1].sequence)


async def test_cancel_during_the_terminal_commit_keeps_one_run_finished(
    stub: Stub, server: RunningServer, fake_model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = WriteGate(server, monkeypatch, ends_a_run)
    fake_model.enqueue(TextReply("finished anyway"))
    call = start_turn(stub, sid, "quick task")
    await asyncio.wait_for(gate.reached.wait(), 10)
    run = actor_of(server, sid).run
    assert run is not None
    cancel = asyncio.ensure_future(stub.CancelRun(turn_api.CancelRunRequest(session_id=sid)))
    await wait_until(lambda: run.stop_reason is not None, "the cancellation reached the run")
    gate.opened.set()
    await asyncio.wait_for(cancel, 10)
    events = await drain(call)
    assert outcome(events) == COMPLETED
    session = await get_session(stub, sid)
    log = await events_after(stub, sid, 0, session.last_sequence)
    assert [e.run_finished.outcome for e in log if e.HasField("run_finished")] == [event_pb2.RUN_OUTCOME_COMPLETED]
    assert log[-1] == events[-1]
    fake_model.enqueue(TextReply("still usable"))
    assert text_of(await stream_turn(stub, sid, "next")) == "still usable"


async def test_a_stopped_run_drops_its_undelivered_injection(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    run = await start_hanging_run(stub, fake_model, sid)
    response = await stub.InjectMessage(turn_api.InjectMessageRequest(session_id=sid, input=text_input("stale note")))
    assert response.accepted is True
    await stub.CancelRun(turn_api.CancelRunRequest(session_id=sid))
    assert outcome(run.seen + await run.rest()) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
    # The next run makes two model calls; the stopped run's message reaches neither.
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_n", name="nope", input={})]), TextReply("fresh"))
    events = await stream_turn(stub, sid, "new task")
    assert "message_injected" not in kinds(events)
    assert outcome(events) == COMPLETED
    for request in fake_model.requests[1:]:
        assert "stale note" not in json.dumps(request.messages)
    assert ("stale note", True) in await user_messages(stub, sid)  # it stays in the transcript
