"""`request_id` on every RPC that takes one: the same key and body answer the first result and apply once; the
same key with another body is INVALID_ARGUMENT `REQUEST_ID_REUSED` naming the field. CreateSession,
ForkSession, StreamTurn and RestoreCheckpoint have their own tests beside their RPCs; this file covers the
others and checks that no RPC with a `request_id` field is left without a test."""

from __future__ import annotations

import grpc

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import agent_service_pb2 as api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import session_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.rpc import Stub, create_session, rpc_error, stream_turn, text_input
from tests.support.runs import start_hanging_run

# Where each RPC with a request_id is tested (file, test name): a new keyed RPC fails this list until it has one.
TESTED_ELSEWHERE = {
    "CreateSession": "test_sessions.py",
    "ForkSession": "test_fork.py",
    "StreamTurn": "test_stream_turn.py",
    "RestoreCheckpoint": "test_checkpoints_rpc.py",
}
TESTED_HERE = {"DeleteSession", "ResumeSession", "ContinueSession", "ResetSession", "InjectMessage"}
TESTED_ELSEWHERE |= {"RequestCompaction": "test_idempotency.py", "MaybeCompactByTokens": "test_idempotency.py"}
NOT_BUILT: set[str] = set()


def test_every_rpc_with_a_request_id_has_an_idempotency_test() -> None:
    service = api.DESCRIPTOR.services_by_name["AgentService"]
    keyed = {m.name for m in service.methods if "request_id" in m.input_type.fields_by_name}
    assert keyed == set(TESTED_ELSEWHERE) | TESTED_HERE | NOT_BUILT


async def assert_reused(awaitable: object) -> None:
    error = await rpc_error(awaitable)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")
    assert [f for f, _ in error.field_violations] == ["request_id"]


async def get(stub: Stub, session_id: str) -> session_pb2.Session:
    return (await stub.GetSession(session_api.GetSessionRequest(session_id=session_id))).session


async def test_delete_session_replays_its_first_answer(stub: Stub) -> None:
    sid = (await create_session(stub)).identity.session_id
    request = session_api.DeleteSessionRequest(session_id=sid, request_id="del-1")
    assert (await stub.DeleteSession(request)).deleted is True
    # The session is gone, yet the retry answers what the first call did.
    assert (await stub.DeleteSession(request)).deleted is True
    assert (await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))).deleted is False
    await assert_reused(stub.DeleteSession(session_api.DeleteSessionRequest(session_id="other", request_id="del-1")))


async def test_resume_session_applies_its_overrides_once(stub: Stub) -> None:
    sid = (await create_session(stub, system_prompt="first")).identity.session_id
    request = session_api.ResumeSessionRequest(
        session_id=sid, overrides=session_pb2.SessionOverrides(system_prompt="second"), request_id="res-1"
    )
    assert (await stub.ResumeSession(request)).session.system_prompt == "second"
    changed = session_api.ResumeSessionRequest(
        session_id=sid, overrides=session_pb2.SessionOverrides(system_prompt="third")
    )
    await stub.ResumeSession(changed)
    replayed = await stub.ResumeSession(request)
    assert replayed.session.system_prompt == "third", "the retry does not apply its overrides again"
    other = session_api.ResumeSessionRequest(
        session_id=sid, overrides=session_pb2.SessionOverrides(system_prompt="fourth"), request_id="res-1"
    )
    await assert_reused(stub.ResumeSession(other))
    assert (await get(stub, sid)).system_prompt == "third"


async def test_continue_session_applies_its_identity_once(stub: Stub) -> None:
    sid = (await create_session(stub)).identity.session_id

    def request(key: str, request_id: str = "cont-1") -> session_api.ContinueSessionRequest:
        return session_api.ContinueSessionRequest(
            identity=session_pb2.SessionIdentity(session_id=sid, session_key=key), request_id=request_id
        )

    assert (await stub.ContinueSession(request("chat-a"))).session.identity.session_key == "chat-a"
    await stub.ContinueSession(request("chat-b", request_id=""))
    assert (await stub.ContinueSession(request("chat-a"))).session.identity.session_key == "chat-b"
    await assert_reused(stub.ContinueSession(request("chat-c")))


async def test_reset_session_resets_once(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    await stream_turn(stub, sid, "before the reset")
    request = session_api.ResetSessionRequest(session_id=sid, reason="manual", request_id="reset-1")
    await stub.ResetSession(request)
    await stream_turn(stub, sid, "after the reset")
    history_before = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    await stub.ResetSession(request)
    history_after = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    assert history_after == history_before, "the retry did not reset again"
    fake_model.enqueue(TextReply("still here"))
    await stream_turn(stub, sid, "next")
    assert len(fake_model.requests[-1].messages) == 3, "the model history after the first reset is intact"
    await assert_reused(
        stub.ResetSession(session_api.ResetSessionRequest(session_id=sid, reason="other", request_id="reset-1"))
    )


async def test_inject_message_is_injected_once(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    run = await start_hanging_run(stub, fake_model, sid, then=[TextReply("done")])
    request = turn_api.InjectMessageRequest(session_id=sid, input=text_input("also this"), request_id="inj-1")
    first = await stub.InjectMessage(request)
    again = await stub.InjectMessage(request)
    assert (first.accepted, first.run_id) == (True, run.run_id)
    assert (again.accepted, again.run_id) == (True, run.run_id)
    await assert_reused(
        stub.InjectMessage(turn_api.InjectMessageRequest(session_id=sid, input=text_input("else"), request_id="inj-1"))
    )
    run.reply.release()
    await run.rest()
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    injected = [e for e in history.entries if e.WhichOneof("entry") == "message" and e.message.injected]
    assert len(injected) == 1
    delivered = [m for m in fake_model.requests[-1].messages if m["role"] == "user"]
    assert str(delivered).count("also this") == 1


async def test_an_inject_refused_on_an_idle_session_answers_the_same_later(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub)).identity.session_id
    request = turn_api.InjectMessageRequest(session_id=sid, input=text_input("hello?"), request_id="inj-idle")
    assert (await stub.InjectMessage(request)).accepted is False
    run = await start_hanging_run(stub, fake_model, sid, "go")
    assert (await stub.InjectMessage(request)).accepted is False, "the retry is not applied to the new run"
    run.reply.release()
    await run.rest()


async def test_compaction_requests_replay_their_first_result(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    for index in range(3):
        fake_model.enqueue(TextReply(f"answer {index}"))
        await stream_turn(stub, sid, f"question {index}")
    fake_model.enqueue(TextReply("summary"))
    request = session_api.RequestCompactionRequest(session_id=sid, request_id="compact-1")
    first = await stub.RequestCompaction(request)
    calls = len(fake_model.requests)
    again = await stub.RequestCompaction(request)
    assert first.result.compacted
    assert again.result == first.result
    assert len(fake_model.requests) == calls  # the replay wrote no second summary
    await assert_reused(
        stub.RequestCompaction(
            session_api.RequestCompactionRequest(session_id=sid, instructions="x", request_id="compact-1")
        )
    )
    maybe = session_api.MaybeCompactByTokensRequest(session_id=sid, request_id="maybe-1")
    assert (await stub.MaybeCompactByTokens(maybe)).result == (await stub.MaybeCompactByTokens(maybe)).result
