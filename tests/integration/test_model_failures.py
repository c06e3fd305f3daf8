"""Model streams that fail after the response started: a connection cut before `message_stop`, a malformed
stream, an error event mid-generation and a read timeout are provider errors (retried, then
FAILED/PROVIDER_ERROR with the right code), and a fragment of a message never enters the model history."""

from __future__ import annotations

import grpc

from general_agent.testing import CutStreamReply, FakeAnthropic, HangReply, StreamErrorReply, TextReply
from general_agent.v1 import event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, connect, create_session, decode_status, stream_turn


async def transcript(stub: Stub, session_id: str) -> list[tuple[str, str, bool]]:
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=session_id))
    out = []
    for entry in history.entries:
        if entry.WhichOneof("entry") == "assistant":
            out.append(("assistant", entry.assistant.text, entry.assistant.aborted))
    return out


async def test_a_stream_cut_before_message_stop_fails_the_run_and_stays_out_of_history(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(CutStreamReply(after_events=4, reply=TextReply("half an answer", chunks=["half ", "an answer"])))
    events = await stream_turn(stub, sid, "first")
    assert kinds(events) == ["run_started", "assistant_delta", "turn_complete", "run_finished"]
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_PROVIDER_ERROR)
    assert finished.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert "message_stop" in finished.error.message
    complete = last_of(events, "turn_complete")
    assert complete.stop_reason == event_pb2.STOP_REASON_ERROR
    assert complete.error == finished.error
    assert await transcript(stub, sid) == [("assistant", "half ", True)]

    fake_model.enqueue(TextReply("whole"))
    await stream_turn(stub, sid, "second")
    sent = fake_model.requests[-1].messages
    assert [m["role"] for m in sent] == ["user"], "the fragment never reaches the model history"
    assert "half" not in str(sent)


async def test_a_broken_stream_is_retried_under_the_retry_budget(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory({"GENERAL_AGENT_MODEL_MAX_RETRIES": "2", "GENERAL_AGENT_MODEL_RETRY_BACKOFF": "0.01"})
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        fake_model.enqueue(
            CutStreamReply(after_events=4, reply=TextReply("lost words", chunks=["lost ", "words"])),
            StreamErrorReply(after_blocks=0),
            TextReply("the answer"),
        )
        events = await stream_turn(stub, sid, "question")
        assert kinds(events) == [
            "run_started",
            "assistant_delta",
            "turn_complete",
            "turn_complete",
            "assistant_delta",
            "usage_snapshot",
            "turn_complete",
            "run_finished",
        ]
        failed = [e.turn_complete for e in events if e.WhichOneof("event") == "turn_complete"][:2]
        assert [f.stop_reason for f in failed] == [event_pb2.STOP_REASON_ERROR] * 2
        assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert text_of(events) == "lost the answer"  # what streamed, abandoned attempt included
        assert len(fake_model.requests) == 3
        session = (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
        assert session.state == session_pb2.SESSION_STATE_IDLE
        assert await transcript(stub, sid) == [("assistant", "lost ", True), ("assistant", "the answer", False)]
        fake_model.enqueue(TextReply("next"))
        await stream_turn(stub, sid, "again")
        sent = fake_model.requests[-1].messages
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[1]["content"][0]["text"] == "the answer"

        # Retries exhausted: the last failure ends the run.
        fake_model.enqueue(
            CutStreamReply(after_events=2), CutStreamReply(after_events=2), CutStreamReply(after_events=2)
        )
        events = await stream_turn(stub, sid, "doomed")
        finished = last_of(events, "run_finished")
        assert (finished.outcome, finished.reason) == (
            event_pb2.RUN_OUTCOME_FAILED,
            event_pb2.RUN_REASON_PROVIDER_ERROR,
        )
        assert [e.WhichOneof("event") for e in events].count("turn_complete") == 3


async def test_a_malformed_stream_is_unavailable_not_internal(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(CutStreamReply(after_events=3, garbage=True))
    events = await stream_turn(stub, sid, "hi")
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_PROVIDER_ERROR)
    assert finished.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert decode_status(finished.error).reason == "PROVIDER_ERROR"


async def test_an_overloaded_error_event_mid_stream_is_unavailable_with_its_status(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(StreamErrorReply(after_blocks=1, error_type="overloaded_error", message="Overloaded"))
    events = await stream_turn(stub, sid, "hi")
    finished = last_of(events, "run_finished")
    assert finished.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    info = decode_status(finished.error)
    assert info.metadata["http_status"] == "529"
    assert info.metadata["error_type"] == "overloaded_error"
    assert "Overloaded" in finished.error.message


async def test_a_read_timeout_mid_stream_is_deadline_exceeded(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory({"GENERAL_AGENT_MODEL_REQUEST_TIMEOUT": "0.3"})
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        hang = HangReply(after_events=4, reply=TextReply("never finished", chunks=["never ", "finished"]))
        fake_model.enqueue(hang)
        try:
            events = await stream_turn(stub, sid, "hi")
        finally:
            hang.release()
        finished = last_of(events, "run_finished")
        assert (finished.outcome, finished.reason) == (
            event_pb2.RUN_OUTCOME_FAILED,
            event_pb2.RUN_REASON_PROVIDER_ERROR,
        )
        assert finished.error.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
