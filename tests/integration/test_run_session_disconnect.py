"""How a RunSession call ends: half-close (after the run, at a suspension, without runs), a deleted session, and
a client that cancels the call under each on_disconnect policy."""

from __future__ import annotations

import asyncio

import grpc

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.support.bidi import TEXT_RUN, hanging_stream_turn, hosted_session, open_bidi
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, create_session, events_after, get_session, stream_turn, wait_idle
from tests.support.runs import hang

# ---------------------------------------------------------------------- half-close and disconnect


async def test_half_close_keeps_sending_until_the_run_finishes(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "long task")
    bidi.close()
    await bidi.half_closed.wait()
    started = await bidi.result("turn")
    await fake_model.wait_for_requests(1)
    gate.release()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    events = bidi.events()
    assert kinds(events) == TEXT_RUN
    assert events[-1].run_id == started.run_id
    assert events[-1].run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(events) == "partial rest"


async def test_half_close_ends_at_a_suspension(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_s", name="lookup", input={"q": "s"})]))
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "ask")
    bidi.close()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    last = bidi.events()[-1]
    assert last.run_finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    # The suspended run is not cancelled by the stream's end.
    session = await get_session(stub, sid)
    assert session.state == session_pb2.SESSION_STATE_SUSPENDED
    assert list(session.pending_call_ids) == ["toolu_s"]


async def test_half_close_without_runs_ends_the_stream(stub: Stub) -> None:
    sid = (await create_session(stub)).identity.session_id
    bidi = await open_bidi(stub, sid)
    bidi.send(ping=run_session_api.RunSessionPing())
    bidi.close()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    assert bidi.summary() == ["heartbeat"]


async def test_delete_session_ends_an_attached_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, bidi, started, gate = await hanging_stream_turn(
        stub, fake_model, on_disconnect=turn_api.ON_DISCONNECT_CONTINUE
    )
    await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))
    finished = await bidi.finished(started.run_id)
    assert (finished.run_finished.outcome, finished.run_finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_SESSION_DELETED,
    )
    # The session is gone, so is the stream (it does not linger on a forgotten session).
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    assert bidi.events()[-1] == finished
    gate.release()


async def test_client_cancel_stops_a_run_the_stream_continued(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_c", name="lookup", input={"q": "c"})]))
    suspended = await stream_turn(stub, sid, "ask")
    run_id = suspended[0].run_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid, on_disconnect=turn_api.ON_DISCONNECT_CANCEL)
    bidi.send(
        hosted_result=run_session_api.RunSessionHostedResult(command_id="res", call_id="toolu_c", output_json='"c"')
    )
    assert (await bidi.result("res")).status.code == 0
    await bidi.first_event(run_id, "assistant_delta")
    bidi.cancel()
    session = await wait_idle(stub, sid)
    log = await events_after(stub, sid, 0, session.last_sequence)
    finished = last_of(log, "run_finished")
    assert log[-1].run_id == run_id
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
    gate.release()


async def _cancel_mid_run(stub: Stub, fake_model: FakeAnthropic, on_disconnect: int) -> tuple[str, str, HangReply]:
    sid, bidi, started, gate = await hanging_stream_turn(stub, fake_model, on_disconnect=on_disconnect)
    bidi.cancel()
    return sid, started.run_id, gate


async def test_client_cancel_with_cancel_policy_stops_the_run(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, run_id, gate = await _cancel_mid_run(stub, fake_model, turn_api.ON_DISCONNECT_CANCEL)
    session = await wait_idle(stub, sid)
    assert await fake_model.requests[0].disconnected.wait(timeout=5)
    log = await events_after(stub, sid, 0, session.last_sequence)
    finished = last_of(log, "run_finished")
    assert log[-1].run_id == run_id
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
    gate.release()
    fake_model.enqueue(TextReply("usable"))
    assert text_of(await stream_turn(stub, sid, "next")) == "usable"


async def test_client_cancel_with_continue_policy_keeps_the_run(
    server: RunningServer, stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid, run_id, gate = await _cancel_mid_run(stub, fake_model, turn_api.ON_DISCONNECT_CONTINUE)
    # Wait until the server has noticed the disconnect (the stream's subscription is gone) before releasing.
    actor = server.agent.cache.peek("default", sid)
    assert actor is not None
    for _ in range(500):
        if not actor.ledger.has_subscribers:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the RunSession handler did not end after the client cancelled")
    assert actor.run is not None
    assert actor.run.run_id == run_id
    gate.release()
    session = await wait_idle(stub, sid)
    log = await events_after(stub, sid, 0, session.last_sequence)
    finished = last_of(log, "run_finished")
    assert log[-1].run_id == run_id
    assert finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(log) == "partial rest"
    assert not fake_model.requests[0].disconnected.is_set()
