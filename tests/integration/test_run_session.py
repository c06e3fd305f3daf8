"""RunSession (docs/protocol.md, "Watching and RunSession") end to end, the protocol itself: what must come first,
turns streamed on one call, and hosted tool rounds resolved over the stream (the call is tests/support/bidi.py's
Bidi). Control commands, attach cursors and disconnects have files of their own (test_run_session_*.py)."""

from __future__ import annotations

import grpc

from general_agent.testing import FakeAnthropic, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from tests.support.bidi import TEXT_RUN, Bidi, assert_strictly_increasing, hosted_session, open_bidi, rpc_failure
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, create_session, decode_status, get_session
from tests.support.runs import hang

# ---------------------------------------------------------------------- protocol errors


async def test_first_message_must_be_attach(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    bidi = Bidi(stub)
    bidi.turn("c1", "hello")
    error = await rpc_failure(bidi)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violations
    assert error.field_violations[0][0] == "attach"
    assert fake_model.requests == []
    assert (await get_session(stub, sid)).last_sequence == 0


async def test_stream_ending_before_attach_is_invalid_argument(stub: Stub) -> None:
    bidi = Bidi(stub)
    bidi.close()
    error = await rpc_failure(bidi)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_attach_to_unknown_session_is_not_found(stub: Stub) -> None:
    bidi = await open_bidi(stub, "no-such-session")
    error = await rpc_failure(bidi)
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    assert error.metadata == {"session_id": "no-such-session"}


# ---------------------------------------------------------------------- turns


async def test_attach_then_turn_streams_the_run(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("Hello there", chunks=["Hello", " there"]))
    bidi = await open_bidi(stub, sid)
    bidi.turn("cmd-1", "hi", request_id="rs-turn-1")
    result = await bidi.result("cmd-1")
    assert result.status.code == 0
    assert result.run_id
    finished = await bidi.finished(result.run_id)
    events = bidi.events()
    assert kinds(events) == TEXT_RUN
    assert all(e.run_id == result.run_id and e.session_id == sid for e in events)
    assert_strictly_increasing(events)
    assert events[0].run_started.trigger == event_pb2.RUN_TRIGGER_TURN
    assert events[0].run_started.request_id == "rs-turn-1"
    assert text_of(events) == "Hello there"
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert fake_model.requests[0].messages[0]["content"][0]["text"] == "hi"
    session = await get_session(stub, sid)
    assert session.last_sequence == finished.sequence
    assert session.state == session_pb2.SESSION_STATE_IDLE
    bidi.close()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK


async def test_several_turns_on_one_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("one"), TextReply("two"), TextReply("three"))
    bidi = await open_bidi(stub, sid)
    run_ids = []
    for index, word in enumerate(("first", "second", "third")):
        bidi.turn(f"t{index}", word)
        result = await bidi.result(f"t{index}")
        assert result.status.code == 0, result.status
        finished = await bidi.finished(result.run_id)
        assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
        run_ids.append(result.run_id)
    assert len(set(run_ids)) == 3
    for run_id, text in zip(run_ids, ("one", "two", "three"), strict=True):
        assert kinds(bidi.events(run_id)) == TEXT_RUN
        assert text_of(bidi.events(run_id)) == text
    assert_strictly_increasing(bidi.events())
    # The third model call carries the whole conversation.
    assert [m["role"] for m in fake_model.requests[2].messages] == ["user", "assistant", "user", "assistant", "user"]
    assert fake_model.requests[2].last_user_text == "third"
    bidi.close()
    await bidi.drain()


async def test_busy_turn_is_a_command_result_and_the_stream_goes_on(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate, TextReply("later"))
    bidi = await open_bidi(stub, sid)
    bidi.turn("long", "long task")
    first = await bidi.result("long")
    bidi.turn("busy", "me too")
    busy = await bidi.result("busy")
    assert busy.status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert decode_status(busy.status).reason == "SESSION_BUSY"
    assert busy.run_id == ""
    gate.release()
    await bidi.finished(first.run_id)
    bidi.turn("after", "now")
    after = await bidi.result("after")
    assert after.status.code == 0
    assert (await bidi.finished(after.run_id)).run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    bidi.close()
    await bidi.drain()


async def test_invalid_turn_input_is_a_command_result(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    bidi = await open_bidi(stub, sid)
    bidi.send(turn=run_session_api.RunSessionTurn(command_id="empty"))
    rejected = await bidi.result("empty")
    assert rejected.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert rejected.run_id == ""
    bidi.turn("ok", "hi")
    ok = await bidi.result("ok")
    assert ok.status.code == 0
    await bidi.finished(ok.run_id)
    assert len(fake_model.requests) == 1
    bidi.close()
    await bidi.drain()


# ---------------------------------------------------------------------- hosted tools


async def test_hosted_tool_round_over_the_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(
        Reply(blocks=[TextBlock("Asking."), ToolUseBlock(id="toolu_h1", name="lookup", input={"q": "weather"})]),
        TextReply("It is sunny."),
    )
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "weather?")
    started = await bidi.result("turn")
    suspended = await bidi.finished(started.run_id, terminal=False)
    assert suspended.run_finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    assert list(suspended.run_finished.pending_call_ids) == ["toolu_h1"]
    hosted = last_of(bidi.events(), "hosted_tool_call")
    assert (hosted.call_id, hosted.tool_name, hosted.input_json) == ("toolu_h1", "lookup", '{"q":"weather"}')
    assert (await get_session(stub, sid)).state == session_pb2.SESSION_STATE_SUSPENDED
    mark = len(bidi.log)
    bidi.send(
        hosted_result=run_session_api.RunSessionHostedResult(
            command_id="res", call_id="toolu_h1", output_json='"sunny, 21 C"'
        )
    )
    resolved = await bidi.result("res")
    assert resolved.status.code == 0
    assert resolved.run_id == started.run_id
    finished = await bidi.finished(started.run_id, start=mark)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    continued = [r.event for r in bidi.log[mark:] if r.WhichOneof("response") == "event"]
    assert kinds(continued) == [
        "tool_result",
        "turn_complete",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    assert all(e.run_id == started.run_id for e in continued)
    assert continued[0].tool_result.call_id == "toolu_h1"
    assert text_of(continued) == "It is sunny."
    assert_strictly_increasing(bidi.events())
    tool_result = fake_model.requests[1].messages[-1]["content"][0]
    assert (tool_result["type"], tool_result["tool_use_id"], tool_result["content"]) == (
        "tool_result",
        "toolu_h1",
        "sunny, 21 C",
    )
    assert (await get_session(stub, sid)).state == session_pb2.SESSION_STATE_IDLE
    bidi.close()
    await bidi.drain()


async def test_hosted_result_for_an_unknown_call_is_a_command_result(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    bidi = await open_bidi(stub, sid)
    bidi.send(
        hosted_result=run_session_api.RunSessionHostedResult(command_id="bad", call_id="toolu_nope", output_json="1")
    )
    rejected = await bidi.result("bad")
    assert rejected.status.code == grpc.StatusCode.NOT_FOUND.value[0]
    info = decode_status(rejected.status)
    assert (info.reason, info.domain) == ("UNKNOWN_TOOL_CALL", "general-agent")
    assert info.metadata["call_id"] == "toolu_nope"
    # A hosted_result without any result is rejected the same way (decode error), and the stream goes on.
    bidi.send(hosted_result=run_session_api.RunSessionHostedResult(command_id="empty", call_id="toolu_nope"))
    assert (await bidi.result("empty")).status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    fake_model.enqueue(TextReply("still here"))
    bidi.turn("later", "hello?")
    later = await bidi.result("later")
    assert later.status.code == 0
    finished = await bidi.finished(later.run_id)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(bidi.events(later.run_id)) == "still here"
    bidi.close()
    await bidi.drain()
