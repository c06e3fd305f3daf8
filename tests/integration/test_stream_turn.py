"""StreamTurn end to end: real anthropic SDK → fake Messages server, events in the order docs/protocol.md gives."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import grpc

from general_agent.testing import (
    ErrorReply,
    FakeAnthropic,
    Reply,
    TextBlock,
    TextReply,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from general_agent.v1 import content_pb2, event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.conftest import TEST_API_KEY, ServerFactory
from tests.support.events import ONE_TOOL_ERROR_THEN_TEXT, kinds, last_of, sequences, text_of
from tests.support.rpc import (
    Stub,
    connect,
    create_session,
    decode_error,
    decode_status,
    events_after,
    rpc_error,
    stream_turn,
    text_input,
    wait_idle,
)
from tests.support.runs import start_hanging_run

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def test_text_turn_order_usage_and_request(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub, system_prompt="You are terse.", model_ref="anthropic/claude-haiku-4-5")
    sid = session.identity.session_id
    fake_model.enqueue(
        TextReply("Hello, world", chunks=["Hel", "lo, ", "world"], usage=Usage(input_tokens=120, output_tokens=7))
    )
    events = await stream_turn(stub, sid, "hi there")
    assert kinds(events) == [
        "run_started",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    assert text_of(events) == "Hello, world"
    assert sequences(events) == sorted(set(sequences(events)))
    assert all(e.session_id == sid and e.run_id == events[0].run_id for e in events)
    started = events[0].run_started
    assert started.trigger == event_pb2.RUN_TRIGGER_TURN
    assert started.model_ref == "anthropic/claude-haiku-4-5"
    snapshot = last_of(events, "usage_snapshot")
    assert (snapshot.used_input_tokens, snapshot.context_window) == (120, 200_000)
    assert snapshot.used_pct == 0.06
    assert last_of(events, "turn_complete").stop_reason == event_pb2.STOP_REASON_STOP
    finished = last_of(events, "run_finished")
    assert finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert (finished.usage.input_tokens, finished.usage.output_tokens, finished.usage.model_calls) == (
        120,
        7,
        1,
    )
    request = fake_model.requests[-1]
    assert request.model == "claude-haiku-4-5"
    assert request.body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert request.messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi there", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    assert request.body["max_tokens"] == 64_000
    assert "thinking" not in request.body  # haiku-4-5 has no adaptive thinking: default is off
    assert request.api_key == TEST_API_KEY
    after = (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
    assert after.last_sequence == events[-1].sequence
    assert after.usage_snapshot.used_input_tokens == 120


async def test_thinking_is_streamed_then_replayed_with_its_signature(stub: Stub, fake_model: FakeAnthropic) -> None:
    session = await create_session(stub)  # default model: adaptive thinking
    sid = session.identity.session_id
    fake_model.enqueue(TextReply("The answer is 4.", thinking="2+2 is 4", signature="sig-abc"))
    events = await stream_turn(stub, sid, "2+2?")
    assert kinds(events) == [
        "run_started",
        "reasoning_delta",
        "reasoning_end",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    assert text_of(events, "reasoning_delta") == "2+2 is 4"
    assert fake_model.requests[0].body["thinking"] == {"type": "adaptive"}
    await stream_turn(stub, sid, "and 3+3?")
    second = fake_model.requests[1].messages
    assert second[1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "2+2 is 4", "signature": "sig-abc"},
            {"type": "text", "text": "The answer is 4."},
        ],
    }
    assert second[2]["content"][0]["text"] == "and 3+3?"


async def test_interleaved_thinking_beta_goes_with_budget_thinking_and_tools(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    budget = session_pb2.ThinkingConfig(mode=session_pb2.THINKING_MODE_BUDGET, budget_tokens=2048)
    cases = [
        # (model, thinking, tools allowed, expected anthropic-beta)
        ("anthropic/claude-haiku-4-5", budget, True, "interleaved-thinking-2025-05-14"),
        ("anthropic/claude-haiku-4-5", budget, False, None),
        ("anthropic/claude-haiku-4-5", session_pb2.ThinkingConfig(mode=session_pb2.THINKING_MODE_OFF), True, None),
        ("anthropic/claude-sonnet-4-6", session_pb2.ThinkingConfig(), True, None),  # adaptive: no beta needed
    ]
    for model_ref, thinking, tools, expected in cases:
        fields: dict[str, object] = {"model_ref": model_ref, "thinking": thinking}
        if not tools:
            fields["allowed_tools"] = ["__none__"]
        sid = (await create_session(stub, **fields)).identity.session_id
        await stream_turn(stub, sid, "hi")
        request = fake_model.requests[-1]
        assert bool(request.tools) is tools, model_ref
        assert request.headers.get("anthropic-beta") == expected, (model_ref, thinking, tools)


async def test_thinking_is_dropped_when_the_model_family_changes(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub, model_ref="claude-sonnet-4-6")).identity.session_id
    fake_model.enqueue(TextReply("A", thinking="think", signature="s1"))
    await stream_turn(stub, sid, "one")
    await stub.ResumeSession(
        session_api.ResumeSessionRequest(
            session_id=sid, overrides=session_pb2.SessionOverrides(model_ref="claude-opus-4-6")
        )
    )
    await stream_turn(stub, sid, "two")
    assert fake_model.requests[1].messages[1]["content"] == [{"type": "text", "text": "A"}]


async def test_image_input_reaches_the_model_and_the_transcript(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    parts = [
        content_pb2.ContentPart(text=content_pb2.TextPart(text="what is this?")),
        content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type="image/png", data=PNG)),
    ]
    events = [r.event async for r in stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=parts))]
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    content = fake_model.requests[-1].messages[0]["content"]
    assert content[0] == {"type": "text", "text": "what is this?"}
    assert content[1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
    }
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    message = history.entries[1].message
    assert message.content[1].image.data == PNG


async def test_invalid_input_is_rejected_before_anything_is_written(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    cases = [
        ([], "input"),
        (text_input("   "), "input"),
        (
            [content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type="image/png", data=b"not a png"))],
            "input[0].image.data",
        ),
        (
            [content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type="image/bmp", data=PNG))],
            "input[0].image.mime_type",
        ),
        (
            [content_pb2.ContentPart(tool_result=content_pb2.ToolResultPart(call_id="c1"))],
            "input[0].tool_result",
        ),
        ([content_pb2.ContentPart()], "input[0]"),
    ]
    for parts, field in cases:
        error = await rpc_error(stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=parts)))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT, field
        assert error.field_violations[0][0] == field
    tool_result_error = await rpc_error(stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=cases[4][0])))
    assert "SubmitHostedToolResult" in tool_result_error.message
    session = (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
    assert (session.last_sequence, session.history_message_count) == (0, 0)
    assert fake_model.requests == []


async def test_no_api_key_fails_before_anything_is_written(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory({"ANTHROPIC_API_KEY": ""})
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        error = await rpc_error(stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("hi"))))
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_API_KEY")
        history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
        assert list(history.entries) == []
        assert (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session.last_sequence == 0
        assert fake_model.requests == []
        # A key given on create lives in memory only and makes the session usable.
        keyed = await create_session(stub, api_key="sk-ant-session-key-9999")
        events = await stream_turn(stub, keyed.identity.session_id, "hi")
        assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert fake_model.requests[-1].api_key == "sk-ant-session-key-9999"
        stored = server.sqlite_path.read_bytes()
        assert b"sk-ant-session-key-9999" not in stored


async def test_a_context_overflow_with_nothing_to_compact_fails_context_overflow(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(ErrorReply(status=400, message="prompt is too long: 230000 tokens > 200000 maximum"))
    finished = last_of(await stream_turn(stub, sid, "huge"), "run_finished")
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_CONTEXT_OVERFLOW)
    assert "prompt is too long" in finished.error.message


async def test_provider_error_fails_the_run_and_the_session_stays_usable(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(ErrorReply(status=400, error_type="invalid_request_error", message="messages: malformed"))
    events = await stream_turn(stub, sid, "first")
    assert kinds(events) == ["run_started", "turn_complete", "run_finished"]
    complete = last_of(events, "turn_complete")
    assert complete.stop_reason == event_pb2.STOP_REASON_ERROR
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.reason) == (
        event_pb2.RUN_OUTCOME_FAILED,
        event_pb2.RUN_REASON_PROVIDER_ERROR,
    )
    assert finished.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "messages: malformed" in finished.error.message
    assert complete.error == finished.error
    fake_model.enqueue(TextReply("recovered"))
    events = await stream_turn(stub, sid, "second")
    assert text_of(events) == "recovered"
    # The failed call left two user messages in a row: they are sent merged, nothing else.
    assert fake_model.requests[-1].messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]


async def test_provider_error_metadata_and_codes(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    for status, code in (
        (529, grpc.StatusCode.UNAVAILABLE),
        (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (401, grpc.StatusCode.PERMISSION_DENIED),
    ):
        fake_model.enqueue(ErrorReply(status=status))
        events = await stream_turn(stub, sid, f"status {status}")
        error = last_of(events, "run_finished").error
        assert error.code == code.value[0], status
        info = decode_status(error)
        assert info.reason == "PROVIDER_ERROR"
        assert info.metadata["http_status"] == str(status)
        assert info.metadata["provider_request_id"].startswith("req_")
        assert TEST_API_KEY not in error.message


async def test_second_turn_while_running_is_session_busy(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    first = await start_hanging_run(stub, fake_model, sid)
    error = await rpc_error(stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("me too"))))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
    assert error.metadata == {"active_run_id": first.run_id, "state": "RUNNING"}
    first.reply.release()
    rest = await first.rest()
    assert text_of(first.seen + rest) == "partial rest"
    assert last_of(rest, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    assert [e.message.content[0].text.text for e in history.entries if e.WhichOneof("entry") == "message"] == [
        "long task"
    ]


async def test_client_cancel_mid_stream_stops_the_run_and_leaves_the_session_usable(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = (await create_session(stub)).identity.session_id
    run = await start_hanging_run(stub, fake_model, sid)
    run.call.cancel()
    session = await wait_idle(stub, sid)
    assert await hang_disconnected(fake_model)
    log = await events_after(stub, sid, 0, session.last_sequence)
    assert kinds(log)[-2:] == ["turn_complete", "run_finished"]
    assert last_of(log, "turn_complete").stop_reason == event_pb2.STOP_REASON_ABORTED
    finished = last_of(log, "run_finished")
    assert (finished.outcome, finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_CANCELLED,
    )
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    assistant = [e.assistant for e in history.entries if e.WhichOneof("entry") == "assistant"]
    assert [(a.text, a.aborted) for a in assistant] == [("partial ", True)]
    fake_model.enqueue(TextReply("fresh"))
    events = await stream_turn(stub, sid, "next")
    assert text_of(events) == "fresh"
    # The aborted partial answer never reached the model history.
    assert [m["role"] for m in fake_model.requests[-1].messages] == ["user"]


async def hang_disconnected(fake_model: FakeAnthropic) -> bool:
    return await fake_model.requests[0].disconnected.wait(timeout=5)


async def test_on_disconnect_continue_keeps_the_run_going(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    options = turn_api.TurnOptions(on_disconnect=turn_api.ON_DISCONNECT_CONTINUE)
    run = await start_hanging_run(stub, fake_model, sid, "keep going", options=options)
    run.call.cancel()
    run.reply.release()
    session = await wait_idle(stub, sid)
    log = await events_after(stub, sid, 0, session.last_sequence)
    assert last_of(log, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(log) == "partial rest"


async def test_stream_turn_is_idempotent_with_request_id(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("only once"))
    first = await stream_turn(stub, sid, "hi", request_id="turn-1")
    again = await stream_turn(stub, sid, "hi", request_id="turn-1")
    assert len(fake_model.requests) == 1
    assert first[0].run_started.request_id == "turn-1"
    assert again[0].sequence == first[0].sequence
    assert again[-1] == first[-1]
    assert text_of(again) == "only once"
    error = await rpc_error(
        stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("other"), request_id="turn-1"))
    )
    assert error.reason == "REQUEST_ID_REUSED"


async def test_max_tokens_inside_a_tool_call_fails_output_truncated(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(
        Reply(
            blocks=[TextBlock("Let me check"), ToolUseBlock(id="toolu_1", name="read", input={"path": "a"})],
            stop_reason="max_tokens",
        )
    )
    events = await stream_turn(stub, sid, "read a")
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.reason) == (
        event_pb2.RUN_OUTCOME_FAILED,
        event_pb2.RUN_REASON_OUTPUT_TRUNCATED,
    )
    assert "tool_call" not in kinds(events)
    fake_model.enqueue(TextReply("ok"))
    await stream_turn(stub, sid, "again")
    assert [m["role"] for m in fake_model.requests[-1].messages] == ["user"]


async def test_unknown_tool_is_an_error_result_and_the_loop_continues(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(
        Reply(
            blocks=[ToolUseBlock(id="toolu_9", name="teleport", input={"to": "mars", "n": 12345678901234567})],
            stop_reason="tool_use",
        ),
        TextReply("I cannot teleport."),
    )
    events = await stream_turn(stub, sid, "go to mars")
    assert kinds(events) == ONE_TOOL_ERROR_THEN_TEXT
    call = last_of(events, "tool_call")
    assert (call.call_id, call.tool_name) == ("toolu_9", "teleport")
    assert call.input_json == '{"to":"mars","n":12345678901234567}'
    assert last_of(events, "tool_error").error == "Tool teleport not found"
    assert fake_model.requests[1].messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_9",
        "content": "Tool teleport not found",
        "is_error": True,
        "cache_control": {"type": "ephemeral"},
    }
    assert last_of(events, "run_finished").usage.model_calls == 2


async def test_watch_replays_then_follows_live_without_gaps(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    first = await stream_turn(stub, sid, "one")
    watch = stub.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=0))
    received: list[event_pb2.SessionEvent] = []

    async def consume() -> None:
        async for response in watch:
            received.append(response.event)
            if response.event.WhichOneof("event") == "run_finished" and response.event.run_id != first[0].run_id:
                return

    consumer = asyncio.create_task(consume())
    second = await stream_turn(stub, sid, "two")
    await asyncio.wait_for(consumer, 10)
    watch.cancel()
    assert sequences(received) == sorted(set(sequences(received)))
    assert received[-1] == second[-1]
    assert text_of(received) == text_of(first) + text_of(second)


async def test_run_finished_error_status_decodes_like_an_rpc_error(server: RunningServer, stub: Stub) -> None:
    # decode_error is shared by tests; make sure a plain NOT_FOUND decodes with domain and reason.
    try:
        await stub.GetSession(session_api.GetSessionRequest(session_id="nope"))
    except grpc.aio.AioRpcError as exc:
        decoded = decode_error(exc)
        assert decoded.reason == "SESSION_NOT_FOUND"
        assert decoded.metadata == {"session_id": "nope"}
    else:
        raise AssertionError("expected NOT_FOUND")


async def test_thinking_block_reply_with_tool_and_text(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(Reply(blocks=[ThinkingBlock("hmm"), TextBlock("done")], stop_reason="end_turn"))
    events = await stream_turn(stub, sid, "x")
    assert kinds(events)[1:4] == ["reasoning_delta", "reasoning_end", "assistant_delta"]


async def test_event_retention_expires_old_cursors(server_factory: ServerFactory, fake_model: FakeAnthropic) -> None:
    server = await server_factory({"GENERAL_AGENT_EVENT_RETENTION_COUNT": "3"})
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        events = await stream_turn(stub, sid, "hello")
        oldest = 0
        for _ in range(500):  # retention runs right after the run; wait for it (bounded)
            oldest = await server.store.oldest_event_sequence("default", sid) or 0
            if oldest > 1:
                break
            await asyncio.sleep(0.01)
        assert oldest == events[-1].sequence - 2
        error = await rpc_error(stub.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=0)))
        assert (error.code, error.reason) == (grpc.StatusCode.OUT_OF_RANGE, "EVENTS_EXPIRED")
        assert error.metadata == {"oldest_sequence": str(oldest)}
        tail = await events_after(stub, sid, oldest - 1, events[-1].sequence)
        assert tail == events[-3:]


async def test_raw_event_log_jsonl(server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path) -> None:
    server = await server_factory({"GENERAL_AGENT_EVENT_LOG": "true"})
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        fake_model.enqueue(TextReply("logged", chunks=["log", "ged"]))
        events = await stream_turn(stub, sid, "hello")
        log = await events_after(stub, sid, 0, events[-1].sequence)
    path = tmp_path / "state" / "events" / "default" / f"{sid}.jsonl"
    lines: list[dict[str, object]] = []
    for _ in range(500):  # written after commit by a background writer; wait for it (bounded)
        if path.exists():
            lines = [json.loads(line) for line in path.read_text().splitlines()]
            if len(lines) == len(log) + 1:
                break
        await asyncio.sleep(0.01)
    assert lines[0]["type"] == "query_started"
    assert lines[0]["runId"] == events[0].run_id
    assert lines[0]["input"] == [{"text": "hello", "kind": "text"}]
    assert [line["sequence"] for line in lines[1:]] == [e.sequence for e in log]
    assert [line["type"] for line in lines[1:]] == [e.WhichOneof("event") for e in log]
    assert "".join(str(line["text"]) for line in lines if line["type"] == "assistant_delta") == "logged"


async def test_a_profile_of_another_tenant_says_so_rather_than_asking_for_a_key(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    config = tmp_path / "profiles.toml"
    config.write_text('[auth_profiles.team]\napi_key_env = "TEAM_KEY"\nallowed_tenants = ["acme"]\n')
    server = await server_factory({"GENERAL_AGENT_CONFIG": str(config), "TEAM_KEY": "sk-ant-team-key-0000000"})
    async with connect(server.address) as stub:
        sid = (await create_session(stub, auth_profile_id="team")).identity.session_id
        error = await rpc_error(stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("hi"))))
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_API_KEY")
        assert error.message == "the session's auth profile 'team' is not available to tenant 'default'"
        assert "ANTHROPIC_API_KEY" not in error.message
        assert fake_model.requests == []
