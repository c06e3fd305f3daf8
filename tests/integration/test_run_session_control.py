"""RunSession control commands: inject, stop and clear_stop, cancel, and ping, each answered by a command result
(or heartbeat) on the stream that sent it, in the order sent."""

from __future__ import annotations

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import event_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from tests.support.bidi import hanging_stream_turn, open_bidi
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, create_session, get_session, stream_turn, text_input
from tests.support.runs import hang

# ---------------------------------------------------------------------- steering, stop, cancel


async def test_inject_while_running(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate, TextReply("steered answer"))
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "long task")
    started = await bidi.result("turn")
    await fake_model.wait_for_requests(1)
    bidi.send(inject=run_session_api.RunSessionInject(command_id="steer", input=text_input("also mention cats")))
    injected = await bidi.result("steer")
    assert injected.status.code == 0
    assert injected.accepted is True
    assert injected.run_id == started.run_id
    gate.release()
    finished = await bidi.finished(started.run_id)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    events = bidi.events(started.run_id)
    assert kinds(events) == [
        "run_started",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "message_injected",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    message = last_of(events, "message_injected")
    assert [p.text.text for p in message.input] == ["also mention cats"]
    assert len(fake_model.requests) == 2
    assert fake_model.requests[1].last_user_text == "also mention cats"
    assert [m["role"] for m in fake_model.requests[1].messages] == ["user", "assistant", "user"]
    # Inject while idle: not accepted, nothing written.
    before = (await get_session(stub, sid)).last_sequence
    bidi.send(inject=run_session_api.RunSessionInject(command_id="idle", input=text_input("too late")))
    idle = await bidi.result("idle")
    assert (idle.status.code, idle.accepted, idle.run_id) == (0, False, "")
    assert (await get_session(stub, sid)).last_sequence == before
    bidi.close()
    await bidi.drain()


async def test_commands_of_one_stream_apply_in_order(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid)
    # Sent back to back, without waiting: the inject and the stop find the run the turn started.
    bidi.turn("turn", "long task")
    bidi.send(inject=run_session_api.RunSessionInject(command_id="steer", input=text_input("steer")))
    bidi.send(stop=run_session_api.RunSessionStop(command_id="stop"))
    bidi.send(clear_stop=run_session_api.RunSessionClearStop(command_id="clear"))
    started = await bidi.result("turn")
    steer = await bidi.result("steer")
    assert (steer.status.code, steer.accepted, steer.run_id) == (0, True, started.run_id)
    stop = await bidi.result("stop")
    assert (stop.status.code, stop.run_id) == (0, started.run_id)
    cleared = await bidi.result("clear")
    assert (cleared.status.code, cleared.accepted) == (0, True)
    finished = await bidi.finished(started.run_id)
    assert finished.run_finished.reason == event_pb2.RUN_REASON_STOP_REQUESTED
    results = [r.command_result.command_id for r in bidi.log if r.WhichOneof("response") == "command_result"]
    assert results == ["turn", "steer", "stop", "clear"]
    assert (await get_session(stub, sid)).stop_requested is False
    gate.release()
    bidi.close()
    await bidi.drain()


async def test_stop_command_then_clear_stop(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, bidi, started, _ = await hanging_stream_turn(stub, fake_model)
    bidi.send(stop=run_session_api.RunSessionStop(command_id="stop"))
    stopped = await bidi.result("stop")
    assert stopped.status.code == 0
    assert stopped.run_id == started.run_id
    finished = await bidi.finished(started.run_id)
    assert (finished.run_finished.outcome, finished.run_finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_STOP_REQUESTED,
    )
    assert await fake_model.requests[0].disconnected.wait(timeout=5)
    assert (await get_session(stub, sid)).stop_requested is True
    # The flag is sticky: the next turn ends at once without calling the model.
    bidi.turn("blocked", "again")
    blocked = await bidi.result("blocked")
    assert blocked.status.code == 0
    blocked_end = await bidi.finished(blocked.run_id)
    assert kinds(bidi.events(blocked.run_id)) == ["run_started", "turn_complete", "run_finished"]
    assert blocked_end.run_finished.reason == event_pb2.RUN_REASON_STOP_REQUESTED
    assert len(fake_model.requests) == 1
    bidi.send(clear_stop=run_session_api.RunSessionClearStop(command_id="clear"))
    cleared = await bidi.result("clear")
    assert (cleared.status.code, cleared.accepted) == (0, True)
    assert (await get_session(stub, sid)).stop_requested is False
    fake_model.enqueue(TextReply("free again"))
    bidi.turn("free", "go")
    free = await bidi.result("free")
    assert (await bidi.finished(free.run_id)).run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(bidi.events(free.run_id)) == "free again"
    bidi.close()
    await bidi.drain()


async def test_cancel_command(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, bidi, started, _ = await hanging_stream_turn(stub, fake_model)
    # A run id that is not the active run cancels nothing.
    bidi.send(cancel=run_session_api.RunSessionCancel(command_id="wrong", run_id="not-this-run"))
    wrong = await bidi.result("wrong")
    assert (wrong.status.code, wrong.run_id) == (0, "")
    bidi.send(cancel=run_session_api.RunSessionCancel(command_id="cancel", run_id=started.run_id))
    cancelled = await bidi.result("cancel")
    assert cancelled.status.code == 0
    assert cancelled.run_id == started.run_id
    finished = await bidi.finished(started.run_id)
    assert (finished.run_finished.outcome, finished.run_finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_CANCELLED,
    )
    assert last_of(bidi.events(started.run_id), "turn_complete").stop_reason == event_pb2.STOP_REASON_ABORTED
    session = await get_session(stub, sid)
    assert session.stop_requested is False  # cancel is not sticky
    assert session.state == session_pb2.SESSION_STATE_IDLE
    fake_model.enqueue(TextReply("next"))
    bidi.turn("next", "again")
    nxt = await bidi.result("next")
    assert (await bidi.finished(nxt.run_id)).run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    bidi.close()
    await bidi.drain()


async def test_ping_answers_a_heartbeat_with_the_last_sequence(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    prior = await stream_turn(stub, sid, "before")
    bidi = await open_bidi(stub, sid)  # live only: nothing is replayed
    bidi.send(ping=run_session_api.RunSessionPing())
    heartbeat = await bidi.wait(lambda r: r.WhichOneof("response") == "heartbeat")
    assert heartbeat.heartbeat.last_sequence == prior[-1].sequence
    assert bidi.summary() == ["heartbeat"]
    bidi.turn("t", "now")
    result = await bidi.result("t")
    finished = await bidi.finished(result.run_id)
    bidi.send(ping=run_session_api.RunSessionPing())
    start = len(bidi.log)
    second = await bidi.wait(lambda r: r.WhichOneof("response") == "heartbeat", start)
    assert second.heartbeat.last_sequence == finished.sequence
    bidi.close()
    await bidi.drain()
