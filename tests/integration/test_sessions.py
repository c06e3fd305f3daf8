"""Session RPCs through the generated stubs against a real server on port 0."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import session_pb2
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.support.rpc import Stub, create_session, rpc_error, stream_turn


async def test_create_generates_a_uuid_and_persists_at_once(stub: Stub, server: RunningServer) -> None:
    session = await create_session(stub, system_prompt="be brief", labels={"team": "a"})
    assert str(uuid.UUID(session.identity.session_id)) == session.identity.session_id
    assert session.tenant == "default"
    assert session.state == session_pb2.SESSION_STATE_IDLE
    assert session.model_ref == "anthropic/claude-sonnet-4-6"  # the server default
    assert session.transcript_path.endswith(f"/transcripts/default/{session.identity.session_id}.jsonl")
    stored = await server.store.get_session("default", session.identity.session_id)
    assert stored is not None
    assert stored.config.system_prompt == "be brief"
    fetched = (await stub.GetSession(session_api.GetSessionRequest(session_id=session.identity.session_id))).session
    assert fetched == session


async def test_explicit_id_and_already_exists(stub: Stub) -> None:
    await create_session(stub, identity=session_pb2.SessionIdentity(session_id="chat-1", session_key="k"))
    error = await rpc_error(create_session(stub, identity=session_pb2.SessionIdentity(session_id="chat-1")))
    assert error.code == grpc.StatusCode.ALREADY_EXISTS
    assert error.reason == "SESSION_ALREADY_EXISTS"
    assert error.metadata["session_id"] == "chat-1"


async def test_create_is_idempotent_with_request_id(stub: Stub) -> None:
    first = await create_session(stub, system_prompt="p", request_id="req-1")
    again = await create_session(stub, system_prompt="p", request_id="req-1")
    assert again.identity.session_id == first.identity.session_id
    listed = await stub.ListSessions(session_api.ListSessionsRequest())
    assert [s.identity.session_id for s in listed.sessions] == [first.identity.session_id]
    error = await rpc_error(create_session(stub, system_prompt="other", request_id="req-1"))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")


async def test_invalid_fields_are_named(stub: Stub) -> None:
    error = await rpc_error(create_session(stub, identity=session_pb2.SessionIdentity(session_id="../escape")))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violations[0][0] == "session.identity.session_id"
    error = await rpc_error(create_session(stub, model_ref="openai/gpt-5"))
    assert error.field_violations[0][0] == "session.model_ref"
    error = await rpc_error(create_session(stub, auth_profile_id="nope"))
    assert error.field_violations == [("session.auth_profile_id", "unknown auth profile 'nope'")]
    error = await rpc_error(stub.CreateSession(session_api.CreateSessionRequest()))
    assert error.field_violations[0][0] == "session"


async def test_memory_config_round_trips_and_is_validated(stub: Stub) -> None:
    memory = session_pb2.MemoryConfig(
        enabled=True, user_id="u1", agent_id="a1", recall_top_k=3, recall_budget_chars=900
    )
    created = await create_session(stub, memory=memory)
    assert created.memory == memory
    error = await rpc_error(create_session(stub, memory=session_pb2.MemoryConfig(enabled=True, recall_top_k=21)))
    assert (error.code, error.field_violations[0][0]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "session.memory.recall_top_k",
    )
    await create_session(stub, memory=session_pb2.MemoryConfig(enabled=False, user_id="u1"))


async def test_automatic_compaction_is_stored_and_its_threshold_checked(stub: Stub) -> None:
    created = await create_session(stub, auto_compaction=session_pb2.AutoCompaction(threshold_pct=80))
    assert created.auto_compaction.threshold_pct == 80
    error = await rpc_error(create_session(stub, auto_compaction=session_pb2.AutoCompaction(threshold_pct=101)))
    assert (error.code, error.field_violations[0][0]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "session.auto_compaction.threshold_pct",
    )


async def test_unknown_session_is_not_found(stub: Stub) -> None:
    for call in (
        stub.GetSession(session_api.GetSessionRequest(session_id="missing")),
        stub.ResumeSession(session_api.ResumeSessionRequest(session_id="missing")),
        stub.ResetSession(session_api.ResetSessionRequest(session_id="missing")),
        stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id="missing")),
        stub.StreamTurn(turn_api.StreamTurnRequest(session_id="missing", input=[])),
    ):
        error = await rpc_error(call)
        assert error.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
        if error.code == grpc.StatusCode.NOT_FOUND:
            assert error.reason == "SESSION_NOT_FOUND"


async def test_list_is_newest_first_paged_and_filtered(stub: Stub) -> None:
    ids = []
    for i in range(5):
        mode = session_pb2.SESSION_MODE_CODING if i % 2 else session_pb2.SESSION_MODE_GENERAL
        s = await create_session(
            stub,
            identity=session_pb2.SessionIdentity(session_key=f"user-{i % 2}/chat-{i}", mode=mode),
            labels={"parity": str(i % 2)},
        )
        ids.append(s.identity.session_id)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await stub.ListSessions(session_api.ListSessionsRequest(page_size=2, page_token=token))
        seen += [s.identity.session_id for s in page.sessions]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(ids))
    assert pages == 3
    by_prefix = await stub.ListSessions(session_api.ListSessionsRequest(session_key_prefix="user-1/"))
    assert [s.identity.session_id for s in by_prefix.sessions] == [ids[3], ids[1]]
    by_mode = await stub.ListSessions(session_api.ListSessionsRequest(mode=session_pb2.SESSION_MODE_CODING))
    assert {s.identity.session_id for s in by_mode.sessions} == {ids[1], ids[3]}
    by_label = await stub.ListSessions(session_api.ListSessionsRequest(labels={"parity": "0"}))
    assert {s.identity.session_id for s in by_label.sessions} == {ids[0], ids[2], ids[4]}
    first = await stub.ListSessions(session_api.ListSessionsRequest(page_size=1))
    error = await rpc_error(
        stub.ListSessions(
            session_api.ListSessionsRequest(page_size=1, page_token=first.next_page_token, labels={"parity": "0"})
        )
    )
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN")
    error = await rpc_error(stub.ListSessions(session_api.ListSessionsRequest(page_token="garbage!")))
    assert error.reason == "INVALID_PAGE_TOKEN"


async def test_delete_removes_everything_and_is_ok_for_unknown(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub)
    sid = session.identity.session_id
    await stream_turn(stub, sid, "hello")
    transcript = Path(session.transcript_path)
    await _flush_exports(stub, sid)  # the export is written after commit by a background writer
    assert transcript.exists()
    deleted = await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))
    assert deleted.deleted is True
    assert not transcript.exists()
    error = await rpc_error(stub.GetSession(session_api.GetSessionRequest(session_id=sid)))
    assert error.reason == "SESSION_NOT_FOUND"
    again = await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))
    assert again.deleted is False


async def test_resume_persists_overrides_used_by_the_next_turn(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub, system_prompt="old prompt", model_ref="claude-haiku-4-5")
    sid = session.identity.session_id
    resumed = await stub.ResumeSession(
        session_api.ResumeSessionRequest(
            session_id=sid,
            overrides=session_pb2.SessionOverrides(system_prompt="new prompt", model_ref="anthropic/claude-opus-4-6"),
        )
    )
    assert resumed.session.system_prompt == "new prompt"
    assert resumed.session.state == session_pb2.SESSION_STATE_IDLE
    await stream_turn(stub, sid, "go")
    request = fake_model.requests[-1]
    assert request.system_text == "new prompt"
    assert request.model == "claude-opus-4-6"  # provider prefix stripped
    assert request.body["thinking"] == {"type": "adaptive"}


async def test_continue_persists_key_and_mode(stub: Stub) -> None:
    session = await create_session(stub, identity=session_pb2.SessionIdentity(session_key="a"))
    sid = session.identity.session_id
    continued = await stub.ContinueSession(
        session_api.ContinueSessionRequest(
            identity=session_pb2.SessionIdentity(session_id=sid, session_key="b", mode=session_pb2.SESSION_MODE_CODING)
        )
    )
    assert continued.session.identity.session_key == "b"
    assert continued.session.identity.mode == session_pb2.SESSION_MODE_CODING
    fetched = await stub.GetSession(session_api.GetSessionRequest(session_id=sid))
    assert fetched.session.identity.session_key == "b"
    error = await rpc_error(
        stub.ContinueSession(
            session_api.ContinueSessionRequest(identity=session_pb2.SessionIdentity(session_id="nope"))
        )
    )
    assert error.reason == "SESSION_NOT_FOUND"


async def test_reset_clears_history_and_keeps_numbering(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub)
    sid = session.identity.session_id
    first = await stream_turn(stub, sid, "remember 42")
    reset = await stub.ResetSession(session_api.ResetSessionRequest(session_id=sid, reason="new topic"))
    assert reset.session.history_message_count == 0
    assert not reset.session.HasField("usage_snapshot")
    assert reset.session.cumulative_usage.model_calls == 1  # cumulative usage is never reset
    second = await stream_turn(stub, sid, "what number?")
    assert second[0].sequence > first[-1].sequence + 1  # the session_reset event sits between
    assert fake_model.requests[-1].messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "what number?", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    kinds = [e.WhichOneof("entry") for e in history.entries]
    assert kinds == [
        "system_prompt",
        "message",
        "assistant",
        "session_reset",
        "system_prompt",
        "message",
        "assistant",
    ]
    assert history.entries[3].session_reset.reason == "new topic"


async def test_history_is_paged_and_matches_the_jsonl_export(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub, system_prompt="sys")
    sid = session.identity.session_id
    for i in range(3):
        fake_model.enqueue(TextReply(f"answer {i}"))
        await stream_turn(stub, sid, f"question {i}")
    entries = []
    token = ""
    while True:
        page = await stub.GetSessionHistory(
            session_api.GetSessionHistoryRequest(session_id=sid, page_size=4, page_token=token)
        )
        assert len(page.entries) <= 4
        entries += list(page.entries)
        token = page.next_page_token
        if not token:
            break
    assert len(entries) == 9
    assert [e.assistant.text for e in entries if e.WhichOneof("entry") == "assistant"] == [
        "answer 0",
        "answer 1",
        "answer 2",
    ]
    await _flush_exports(stub, sid)
    lines = [json.loads(line) for line in Path(session.transcript_path).read_text().splitlines()]
    assert [line["type"] for line in lines] == [e.WhichOneof("entry") for e in entries]
    assert lines[0] == {
        "type": "system_prompt",
        "prompt": "sys",
        "modelRef": "anthropic/claude-sonnet-4-6",
        "timestamp": lines[0]["timestamp"],
        "sequence": entries[0].sequence,
        "runId": entries[0].run_id,
    }
    assert lines[1]["content"] == [{"type": "text", "text": "question 0"}]
    assert lines[2]["text"] == "answer 0"


async def _flush_exports(stub: Stub, session_id: str) -> None:
    """The export is written after commit by a background writer; GetSession does not wait for it, so
    poll (bounded) until the file has caught up."""
    import asyncio

    path = Path((await stub.GetSession(session_api.GetSessionRequest(session_id=session_id))).session.transcript_path)
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=session_id, page_size=1000))
    for _ in range(200):
        if path.exists() and len(path.read_text().splitlines()) == len(history.entries):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("transcript export did not catch up")
