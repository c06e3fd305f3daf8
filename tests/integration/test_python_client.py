"""The ergonomic Python client (general_agent.AgentClient) against a real in-process server on port 0."""

from __future__ import annotations

import asyncio
import base64
import pickle
from collections.abc import AsyncIterator

import grpc
import pytest

from general_agent import (
    AgentClient,
    AgentError,
    Image,
    SessionBusy,
    SessionNotFound,
    TurnResult,
    event_kind,
    is_terminal,
    iter_known,
    text_of,
)
from general_agent.events import aiter_known, outcome_name
from general_agent.testing import ErrorReply, FakeAnthropic, HangReply, TextReply
from general_agent.v1 import event_pb2, session_pb2, transcript_pb2
from general_agent_server.app import RunningServer

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AgentClient]:
    async with await AgentClient.connect(server.address) as agent_client:
        yield agent_client


async def wait_idle(client: AgentClient, session_id: str) -> session_pb2.Session:
    for _ in range(500):
        session = await client.get_session(session_id)
        if session.state == session_pb2.SESSION_STATE_IDLE:
            return session
        await asyncio.sleep(0.01)
    raise AssertionError("session did not become idle")


async def collect(client: AgentClient, session_id: str, text: str) -> list[event_pb2.SessionEvent]:
    return [event async for event in client.stream_turn(session_id, text)]


# ---------------------------------------------------------------------- sessions


async def test_create_get_list_and_delete(client: AgentClient) -> None:
    created = await client.create_session(
        session_id="py-client-1",
        session_key="chat:42",
        mode="CODING",
        system_prompt="be brief",
        labels={"suite": "client"},
    )
    assert created.identity.session_id == "py-client-1"
    assert created.identity.session_key == "chat:42"
    assert created.identity.mode == session_pb2.SESSION_MODE_CODING
    assert created.system_prompt == "be brief"
    assert dict(created.labels) == {"suite": "client"}
    assert created.state == session_pb2.SESSION_STATE_IDLE

    fetched = await client.get_session("py-client-1")
    assert fetched == created

    generated = await client.create_session()
    assert generated.identity.session_id  # a server UUID
    assert generated.identity.mode == session_pb2.SESSION_MODE_GENERAL

    assert await client.delete_session("py-client-1") is True
    assert await client.delete_session("py-client-1") is False
    with pytest.raises(SessionNotFound):
        await client.get_session("py-client-1")


async def test_list_sessions_follows_page_tokens(client: AgentClient) -> None:
    ids = {(await client.create_session(labels={"batch": "paged"})).identity.session_id for _ in range(5)}
    await client.create_session(labels={"batch": "other"})

    first_page, token = await client.list_sessions_page(page_size=2, labels={"batch": "paged"})
    assert len(first_page) == 2
    assert token

    listed = [s.identity.session_id async for s in client.list_sessions(page_size=2, labels={"batch": "paged"})]
    assert len(listed) == len(set(listed)) == 5
    assert set(listed) == ids
    assert listed[:2] == [s.identity.session_id for s in first_page]

    everything = [s async for s in client.list_sessions()]
    assert len(everything) == 6
    coding = [s async for s in client.list_sessions(mode="CODING")]
    assert coding == []


async def test_resume_and_reset(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session(system_prompt="old")).identity.session_id
    resumed = await client.resume_session(sid, system_prompt="new", model_ref="anthropic/claude-haiku-4-5")
    assert (resumed.system_prompt, resumed.model_ref) == ("new", "anthropic/claude-haiku-4-5")
    kept = await client.resume_session(sid)
    assert (kept.system_prompt, kept.model_ref) == ("new", "anthropic/claude-haiku-4-5")

    fake_model.enqueue(TextReply("hi"))
    await client.run_text(sid, "hello")
    assert (await client.get_session(sid)).history_message_count == 2
    reset = await client.reset_session(sid)
    assert reset.history_message_count == 0
    assert reset.system_prompt == "new"
    entries = [entry async for entry in client.history(sid)]
    assert entries[-1].WhichOneof("entry") == "session_reset"
    assert entries[-1].session_reset.reason == "manual"

    with pytest.raises(SessionNotFound):
        await client.resume_session("missing")
    with pytest.raises(SessionNotFound):
        await client.reset_session("missing")


async def test_server_info(client: AgentClient) -> None:
    info = await client.server_info()
    assert info.api_version == "general_agent.v1"
    assert {"sessions", "checkpoints", "hooks_session", "subagents"} <= set(info.capabilities)
    assert info.default_model_ref


# ---------------------------------------------------------------------- turns


async def test_stream_turn_yields_the_fake_models_text(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(TextReply("Hello from the fake model", chunks=["Hello ", "from the ", "fake model"]))

    events = await collect(client, sid, "hi there")

    assert event_kind(events[0]) == "run_started"
    assert text_of(events) == "Hello from the fake model"
    assert is_terminal(events[-1])
    assert outcome_name(events[-1]) == "COMPLETED"
    assert [e for e in events if is_terminal(e)] == [events[-1]]
    assert all(e.session_id == sid and e.run_id == events[0].run_id for e in events)
    assert fake_model.requests[-1].last_user_text == "hi there"


async def test_stream_turn_accepts_mixed_text_and_images(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(TextReply("a pixel"), TextReply("two pixels"))

    events = await collect_parts(client, sid, ["what is this?", Image("image/png", PNG)])
    assert text_of(events) == "a pixel"
    content = fake_model.requests[-1].messages[-1]["content"]
    assert [block["type"] for block in content] == ["text", "image"]
    assert content[1]["source"]["media_type"] == "image/png"
    assert base64.b64decode(content[1]["source"]["data"]) == PNG

    events = [e async for e in client.stream_turn(sid, "and these?", images=[Image("image/png", PNG)] * 2)]
    assert outcome_name(events[-1]) == "COMPLETED"
    content = fake_model.requests[-1].messages[-1]["content"]
    assert [block["type"] for block in content] == ["text", "image", "image"]


async def collect_parts(client: AgentClient, session_id: str, parts: list[str | Image]) -> list[event_pb2.SessionEvent]:
    return [event async for event in client.stream_turn(session_id, parts)]


async def test_run_text_returns_text_outcome_and_events(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(TextReply("forty-two"))

    result = await client.run_text(sid, "the answer?")

    assert isinstance(result, TurnResult)
    assert (result.text, result.outcome, result.reason, result.error) == ("forty-two", "COMPLETED", "", None)
    assert result.ok
    assert result.run_id == result.events[0].run_id != ""
    assert event_kind(result.events[0]) == "run_started"
    assert is_terminal(result.events[-1])


async def test_run_text_reports_a_failed_run(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(ErrorReply(400, message="bad request body"))

    result = await client.run_text(sid, "fail please")

    assert (result.outcome, result.reason, result.ok) == ("FAILED", "PROVIDER_ERROR", False)
    assert result.error is not None
    assert result.error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert result.error.reason == "PROVIDER_ERROR"
    assert result.error.domain == "general-agent"
    assert result.error.metadata["http_status"] == "400"
    # the session stays usable
    fake_model.enqueue(TextReply("recovered"))
    assert (await client.run_text(sid, "again")).text == "recovered"


async def test_leaving_a_stream_early_cancels_the_run(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    hang = HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))
    fake_model.enqueue(hang)
    stream = client.stream_turn(sid, "long task")
    async for event in stream:
        if event_kind(event) == "assistant_delta":
            break
    await stream.aclose()

    session = await wait_idle(client, sid)
    log = [e async for e in until(client.watch(sid, after_sequence=0), session.last_sequence)]
    finished = log[-1].run_finished
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)


async def test_busy_session_raises_session_busy(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    hang = HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))
    fake_model.enqueue(hang)
    first = client.stream_turn(sid, "long task")
    started = await anext(first)
    assert event_kind(started) == "run_started"

    with pytest.raises(SessionBusy) as caught:
        await client.run_text(sid, "me too")
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.reason == "SESSION_BUSY"
    assert caught.value.metadata["active_run_id"] == started.run_id

    hang.release()
    rest = [event async for event in first]
    assert text_of(rest) == "partial rest"
    assert outcome_name(rest[-1]) == "COMPLETED"


# ---------------------------------------------------------------------- watch and history


async def until(events: AsyncIterator[event_pb2.SessionEvent], last: int) -> AsyncIterator[event_pb2.SessionEvent]:
    async for event in events:
        yield event
        if event.sequence >= last:
            return


async def test_watch_replays_the_log(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(TextReply("one"), TextReply("two"))
    first = await collect(client, sid, "first")
    second = await collect(client, sid, "second")
    last = second[-1].sequence

    replayed = [e async for e in until(client.watch(sid, after_sequence=0), last)]
    assert [e.sequence for e in replayed] == [e.sequence for e in first + second]

    tail = [e async for e in until(client.watch(sid, after_sequence=first[-1].sequence), last)]
    assert [e.sequence for e in tail] == [e.sequence for e in second]
    assert text_of(tail) == "two"

    with pytest.raises(SessionNotFound):
        async for _ in client.watch("missing", after_sequence=0):
            pass


async def test_history_pages(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session(system_prompt="sys")).identity.session_id
    fake_model.enqueue(TextReply("reply one"), TextReply("reply two"))
    await client.run_text(sid, "question one")
    await client.run_text(sid, "question two")

    everything = [entry async for entry in client.history(sid)]
    paged = [entry async for entry in client.history(sid, page_size=1)]
    assert paged == everything
    assert len(everything) >= 4

    page, token = await client.history_page(sid, page_size=1)
    assert len(page) == 1
    assert token
    page_two, _ = await client.history_page(sid, page_size=1, page_token=token)
    assert page_two == everything[1:2]

    kinds = [entry.WhichOneof("entry") for entry in everything]
    assert "message" in kinds
    assert "assistant" in kinds
    users = [e.message.content[0].text.text for e in everything if e.WhichOneof("entry") == "message"]
    assert users == ["question one", "question two"]
    assistants = [e.assistant.text for e in everything if e.WhichOneof("entry") == "assistant"]
    assert assistants == ["reply one", "reply two"]
    assert all(isinstance(e, transcript_pb2.TranscriptEntry) for e in everything)

    with pytest.raises(SessionNotFound):
        async for _ in client.history("missing"):
            pass


# ---------------------------------------------------------------------- errors


async def test_not_found_is_a_session_not_found_error(client: AgentClient) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await client.get_session("no-such-session")
    error = caught.value
    assert isinstance(error, AgentError)
    assert error.code == grpc.StatusCode.NOT_FOUND
    assert error.reason == "SESSION_NOT_FOUND"
    assert error.domain == "general-agent"
    assert error.metadata == {"session_id": "no-such-session"}
    assert "no-such-session" in error.message
    assert len(error.request_id) == 32
    assert error.status is not None
    assert str(error).startswith("NOT_FOUND SESSION_NOT_FOUND: ")

    with pytest.raises(SessionNotFound):
        await client.run_text("no-such-session", "hello")

    copy = pickle.loads(pickle.dumps(error))  # noqa: S301  (our own bytes)
    assert type(copy) is SessionNotFound
    assert (copy.code, copy.reason, copy.metadata) == (error.code, error.reason, error.metadata)


async def test_validation_error_names_the_field(client: AgentClient) -> None:
    with pytest.raises(AgentError) as caught:
        await client.create_session(session_id="../x")
    error = caught.value
    assert type(error) is AgentError
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violation("session.identity.session_id") is not None
    assert [field for field, _ in error.field_violations] == ["session.identity.session_id"]

    sid = (await client.create_session()).identity.session_id
    with pytest.raises(AgentError) as caught:
        await anext(client.stream_turn(sid, []))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_already_exists(client: AgentClient) -> None:
    await client.create_session(session_id="dup")
    with pytest.raises(AgentError) as caught:
        await client.create_session(session_id="dup")
    assert caught.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert caught.value.reason == "SESSION_ALREADY_EXISTS"


async def test_the_error_of_a_blocking_call_decodes_like_that_of_an_aio_call(server: RunningServer) -> None:
    method = "/general_agent.v1.AgentService/GetSession"  # raw bytes in and out: b"" is a request without an id
    with grpc.insecure_channel(server.address) as channel:
        blocking_call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
        with pytest.raises(grpc.RpcError) as blocking:
            await asyncio.to_thread(blocking_call, b"")
    async with grpc.aio.insecure_channel(server.address) as aio_channel:
        aio_call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = aio_channel.unary_unary(method)
        with pytest.raises(grpc.aio.AioRpcError) as aio:
            await aio_call(b"")
    assert not isinstance(blocking.value, grpc.aio.AioRpcError)
    decoded = AgentError.from_rpc_error(blocking.value)
    assert type(decoded) is AgentError
    assert (decoded.code, decoded.reason, decoded.domain) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        "general-agent",
    )
    assert decoded.field_violations == [("session_id", "is required")]
    assert decoded.status is not None
    assert repr(decoded) == repr(AgentError.from_rpc_error(aio.value))


async def test_connect_to_nothing_is_unavailable() -> None:
    with pytest.raises(AgentError) as caught:
        await AgentClient.connect("127.0.0.1:1", connect_timeout=0.2)
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


async def test_unary_deadlines(server: RunningServer) -> None:
    """A server that accepts TCP but never speaks HTTP/2: unary calls end at their deadline."""
    writers: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    blackhole = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = blackhole.sockets[0].getsockname()[1]
    try:
        async with AgentClient(f"127.0.0.1:{port}", timeout=0.2) as client:
            with pytest.raises(AgentError) as caught:
                await client.server_info()  # the client's default deadline
            assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            with pytest.raises(AgentError) as caught:
                await client.get_session("any", timeout=0.05)  # a per-call deadline
            assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        for writer in writers:
            writer.close()
        blackhole.close()
        await blackhole.wait_closed()

    async with AgentClient(server.address, timeout=None) as client:  # no deadline at all
        assert (await client.server_info()).api_version == "general_agent.v1"


# ---------------------------------------------------------------------- forward compatibility


def unknown_variant_event(sequence: int) -> event_pb2.SessionEvent:
    """A SessionEvent as a newer server would send it: oneof field 99 (unknown to this client) set."""
    known = event_pb2.SessionEvent(sequence=sequence, session_id="s").SerializeToString()
    field_99_empty_message = b"\x9a\x06\x00"  # tag (99 << 3 | 2) as a varint, then length 0
    return event_pb2.SessionEvent.FromString(known + field_99_empty_message)


async def test_unknown_event_variants_are_skipped() -> None:
    unknown = unknown_variant_event(7)
    assert unknown.sequence == 7
    assert event_kind(unknown) == ""
    delta = event_pb2.SessionEvent(sequence=8, assistant_delta=event_pb2.AssistantDeltaEvent(text="hi"))
    assert [e.sequence for e in iter_known([unknown, delta])] == [8]

    async def stream() -> AsyncIterator[event_pb2.SessionEvent]:
        yield unknown
        yield delta

    assert [e.sequence async for e in aiter_known(stream())] == [8]
    assert not is_terminal(unknown)
    suspended = event_pb2.SessionEvent(run_finished=event_pb2.RunFinishedEvent(outcome=event_pb2.RUN_OUTCOME_SUSPENDED))
    assert not is_terminal(suspended)
    assert outcome_name(suspended) == "SUSPENDED"
