"""Drive the real ``anthropic`` SDK against the scripted fake Anthropic API.

Why against the real SDK: the fake is only useful if the official client
accepts its wire format (SSE framing, stream accumulation, retries, error
mapping) exactly as it accepts the real API's.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anthropic
import httpx
import httpx2
import pytest

try:
    import general_agent.testing  # noqa: F401
except ImportError:  # the client package is not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))

from general_agent.testing import (
    ErrorReply,
    FakeAnthropic,
    FakeAnthropicThread,
    HangReply,
    RecordedRequest,
    RedactedThinkingBlock,
    Reply,
    ReplyLike,
    StreamErrorReply,
    TextBlock,
    TextReply,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    estimate_tokens,
    text_deltas,
)

pytestmark = pytest.mark.timeout(60)

MODEL = "claude-test-model"
SRC_DIR = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


def make_client(fake: FakeAnthropic, *, max_retries: int = 0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test-key", max_retries=max_retries)


def user(text: str) -> list[anthropic.types.MessageParam]:
    return [{"role": "user", "content": text}]


@pytest.mark.asyncio
async def test_text_stream_deltas_in_order_with_final_text_and_usage(fake: FakeAnthropic) -> None:
    chunks = ["Hel", "lo, ", "wor", "ld", "!"]
    usage = Usage(input_tokens=42, output_tokens=7, cache_creation_input_tokens=3, cache_read_input_tokens=5)
    fake.enqueue(TextReply("Hello, world!", chunks=chunks, usage=usage))
    async with (
        make_client(fake) as client,
        client.messages.stream(model=MODEL, max_tokens=100, messages=user("hi")) as stream,
    ):
        got = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert got == chunks
    assert final.content[0].type == "text"
    assert final.content[0].text == "Hello, world!"
    assert final.model == MODEL
    assert final.stop_reason == "end_turn"
    assert final.id.startswith("msg_")
    assert final.usage.input_tokens == 42
    assert final.usage.output_tokens == 7
    assert final.usage.cache_creation_input_tokens == 3
    assert final.usage.cache_read_input_tokens == 5


@pytest.mark.asyncio
async def test_raw_event_sequence_from_create_stream(fake: FakeAnthropic) -> None:
    fake.enqueue(TextReply("a b c", usage=Usage(input_tokens=9, output_tokens=3)))
    async with make_client(fake) as client:
        stream = await client.messages.create(model=MODEL, max_tokens=10, messages=user("hi"), stream=True)
        events = [event async for event in stream]
    types = [e.type for e in events]
    # The SDK drops `ping` itself; everything else arrives in the documented order.
    assert types == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]
    assert start.type == "message_start"
    assert start.message.usage.input_tokens == 9
    assert start.message.usage.cache_read_input_tokens == 0
    delta = events[-2]
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "end_turn"
    assert delta.delta.stop_sequence is None
    assert delta.usage.output_tokens == 3


@pytest.mark.asyncio
async def test_sse_frames_are_byte_exact(fake: FakeAnthropic) -> None:
    fake.enqueue(TextReply("hi", ping=True))
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{fake.base_url}/v1/messages",
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            json={"model": MODEL, "max_tokens": 5, "messages": user("x"), "stream": True},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = response.text.split("\n\n")
    assert frames[-1] == ""
    names = []
    for frame in frames[:-1]:
        event_line, data_line = frame.split("\n")
        assert event_line.startswith("event: ")
        assert data_line.startswith("data: ")
        name = event_line.removeprefix("event: ")
        assert json.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.asyncio
async def test_thinking_and_signature_land_in_final_message(fake: FakeAnthropic) -> None:
    fake.enqueue(TextReply("Answer.", thinking="Let me think about it.", signature="sig-abc123"))
    async with (
        make_client(fake) as client,
        client.messages.stream(model=MODEL, max_tokens=100, messages=user("q")) as stream,
    ):
        thinking_deltas = [e.thinking async for e in stream if e.type == "thinking"]
        final = await stream.get_final_message()
    assert "".join(thinking_deltas) == "Let me think about it."
    assert len(thinking_deltas) > 1
    block = final.content[0]
    assert block.type == "thinking"
    assert block.thinking == "Let me think about it."
    assert block.signature == "sig-abc123"
    assert final.content[1].type == "text"
    assert final.content[1].text == "Answer."


@pytest.mark.asyncio
async def test_thinking_redacted_and_text_blocks(fake: FakeAnthropic) -> None:
    fake.enqueue(
        Reply(
            blocks=[
                ThinkingBlock("step one", signature="s1", chunks=["step", " one"]),
                RedactedThinkingBlock("opaque=="),
                TextBlock("done"),
            ]
        )
    )
    async with (
        make_client(fake) as client,
        client.messages.stream(model=MODEL, max_tokens=100, messages=user("q")) as stream,
    ):
        final = await stream.get_final_message()
    thinking, redacted, text = final.content
    assert thinking.type == "thinking"
    assert thinking.signature == "s1"
    assert redacted.type == "redacted_thinking"
    assert redacted.data == "opaque=="
    assert text.type == "text"


@pytest.mark.asyncio
async def test_tool_use_input_parsed_from_chunked_partial_json(fake: FakeAnthropic) -> None:
    tool_input = {"city": "Zürich", "days": 3, "units": {"temp": "C"}}
    fake.enqueue(
        Reply(
            blocks=[
                TextBlock("Checking."),
                ToolUseBlock("toolu_01", "get_weather", tool_input, json_chunks=5),
            ]
        )
    )
    async with make_client(fake) as client:
        stream = await client.messages.create(model=MODEL, max_tokens=100, messages=user("w"), stream=True)
        partials = [
            e.delta.partial_json
            async for e in stream
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
    assert len(partials) == 5
    assert json.loads("".join(partials)) == tool_input

    fake.enqueue(Reply(blocks=[ToolUseBlock("toolu_02", "get_weather", tool_input, json_chunks=4)]))
    async with (
        make_client(fake) as client,
        client.messages.stream(model=MODEL, max_tokens=100, messages=user("w")) as s,
    ):
        final = await s.get_final_message()
    block = final.content[0]
    assert block.type == "tool_use"
    assert block.id == "toolu_02"
    assert block.name == "get_weather"
    assert block.input == tool_input
    assert final.stop_reason == "tool_use"


@pytest.mark.asyncio
async def test_529_twice_then_success_with_max_retries_2(fake: FakeAnthropic) -> None:
    fake.enqueue(ErrorReply(529, "overloaded_error", "Overloaded", times=2, retry_after=0.01), TextReply("ok!"))
    async with (
        make_client(fake, max_retries=2) as client,
        client.messages.stream(model=MODEL, max_tokens=10, messages=user("hi")) as stream,
    ):
        final = await stream.get_final_message()
    assert final.content[0].type == "text"
    assert final.content[0].text == "ok!"
    recorded = fake.requests
    assert [r.status for r in recorded] == [529, 529, 200]
    assert [r.headers.get("X-Stainless-Retry-Count") for r in recorded] == ["0", "1", "2"]
    assert fake.pending_replies == 0


@pytest.mark.asyncio
async def test_retries_exhausted_raise_the_last_error(fake: FakeAnthropic) -> None:
    fake.enqueue(ErrorReply(429, times=3, retry_after=0.01))
    async with make_client(fake, max_retries=2) as client:
        with pytest.raises(anthropic.RateLimitError) as info:
            await client.messages.create(model=MODEL, max_tokens=10, messages=user("hi"))
    assert info.value.type == "rate_limit_error"
    assert len(fake.requests) == 3


@pytest.mark.asyncio
async def test_400_raises_bad_request_with_message_and_request_id(fake: FakeAnthropic) -> None:
    fake.enqueue(ErrorReply(400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000"))
    async with make_client(fake, max_retries=2) as client:
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(model=MODEL, max_tokens=10, messages=user("hi"), stream=True)
    err = info.value
    assert err.status_code == 400
    assert "prompt is too long" in str(err)
    assert err.api_message == "prompt is too long: 300000 tokens > 200000"
    assert err.type == "invalid_request_error"
    (recorded,) = fake.requests  # a 400 is not retried
    assert err.request_id == recorded.request_id
    assert err.request_id is not None
    assert err.request_id.startswith("req_")


@pytest.mark.asyncio
async def test_mid_stream_error_event(fake: FakeAnthropic) -> None:
    fake.enqueue(StreamErrorReply(after_blocks=1, error_type="overloaded_error", message="Overloaded"))
    seen: list[str] = []

    async def consume() -> None:
        async with (
            make_client(fake, max_retries=2) as client,
            client.messages.stream(model=MODEL, max_tokens=10, messages=user("hi")) as stream,
        ):
            async for text in stream.text_stream:
                seen.append(text)

    with pytest.raises(anthropic.APIStatusError) as info:
        await consume()
    assert seen == ["partial "]
    assert info.value.type == "overloaded_error"
    assert info.value.api_message == "Overloaded"
    assert len(fake.requests) == 1  # a stream that already answered 200 is not retried


@pytest.mark.asyncio
async def test_recorded_request_has_system_messages_tools(fake: FakeAnthropic) -> None:
    tools: list[anthropic.types.ToolParam] = [
        {"name": "search", "description": "Search.", "input_schema": {"type": "object", "properties": {}}}
    ]
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"}]},
    ]
    async with make_client(fake) as client:
        await client.messages.create(
            model=MODEL,
            max_tokens=321,
            system=[
                {"type": "text", "text": "You are terse."},
                {"type": "text", "text": "Cite sources.", "cache_control": {"type": "ephemeral"}},
            ],
            messages=messages,
            tools=tools,
        )
        await client.messages.create(model=MODEL, max_tokens=5, system="plain system", messages=user("x"))
    first, second = await fake.wait_for_requests(2, timeout=5)
    assert first.path == "/v1/messages"
    assert first.model == MODEL
    assert first.max_tokens == 321
    assert first.stream is False
    assert first.system_text == "You are terse.\nCite sources."
    assert first.messages == messages
    assert first.tools == tools
    assert first.last_user_text == "second\npart"
    assert first.api_key == "test-key"
    assert first.headers["AUTHORIZATION"] == "Bearer test-key"  # how this SDK sends api_key
    assert first.headers["anthropic-version"]
    assert first.body["max_tokens"] == 321
    assert second.system_text == "plain system"
    assert second.last_user_text == "x"


@pytest.mark.asyncio
async def test_non_streaming_returns_full_message_and_default_reply(fake: FakeAnthropic) -> None:
    async with make_client(fake) as client:
        message = await client.messages.create(model=MODEL, max_tokens=5, messages=user("x"))
    assert message.content[0].type == "text"
    assert message.content[0].text == "ok"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens >= 1


@pytest.mark.asyncio
async def test_count_tokens(fake: FakeAnthropic) -> None:
    async with make_client(fake) as client:
        result = await client.messages.count_tokens(model=MODEL, messages=user("hello " * 40))
    (recorded,) = fake.all_requests
    assert recorded.path == "/v1/messages/count_tokens"
    compact = json.dumps(recorded.body, separators=(",", ":"))
    assert result.input_tokens == estimate_tokens(recorded.body) == len(compact) // 4
    assert fake.requests == []  # count_tokens does not consume scripted replies


@pytest.mark.asyncio
async def test_validation_like_the_real_api(fake: FakeAnthropic) -> None:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=fake.base_url) as http:
        missing = await http.post("/v1/messages", headers=headers, json={"model": MODEL, "messages": []})
        no_key = await http.post(
            "/v1/messages",
            headers={"anthropic-version": "2023-06-01"},
            json={"model": MODEL, "max_tokens": 1, "messages": []},
        )
        bad_json = await http.post("/v1/messages", headers=headers, content=b"{not json")
        unknown = await http.post("/v1/complete", headers=headers, json={})
    assert missing.status_code == 400
    assert missing.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
    assert missing.json()["type"] == "error"
    assert missing.headers["request-id"].startswith("req_")
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    assert bad_json.status_code == 400
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "not_found_error"
    assert [r.status for r in fake.requests] == [400, 401, 400]  # rejected requests are recorded
    assert fake.requests[1].body["max_tokens"] == 1
    assert fake.pending_replies == 0

    async with anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError, match="model: Field required"):
            await client.messages.create(
                max_tokens=1,
                messages=user("x"),
                model=MODEL,
                extra_body={"model": anthropic.omit},
            )


@pytest.mark.asyncio
async def test_hang_reply_client_cancel_sets_disconnected(fake: FakeAnthropic) -> None:
    hang = HangReply(after_events=3)  # message_start, content_block_start, ping
    fake.enqueue(hang)
    got_first = asyncio.Event()

    async def consume() -> None:
        async with (
            make_client(fake) as client,
            client.messages.stream(model=MODEL, max_tokens=10, messages=user("x")) as stream,
        ):
            async for _ in stream:
                got_first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_first.wait(), 5)
    (recorded,) = await fake.wait_for_requests(1)
    assert not recorded.disconnected.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await recorded.disconnected.wait(timeout=5)
    assert not recorded.completed.is_set()
    assert not hang.gate.is_set()


@pytest.mark.asyncio
async def test_hang_reply_released_completes(fake: FakeAnthropic) -> None:
    hang = HangReply(after_events=1, reply=TextReply("after the gate"))
    fake.enqueue(hang)
    async with (
        make_client(fake) as client,
        client.messages.stream(model=MODEL, max_tokens=10, messages=user("x")) as stream,
    ):
        first = await stream.__anext__()
        assert first.type == "message_start"
        hang.release()
        final = await stream.get_final_message()
    assert final.content[0].type == "text"
    assert final.content[0].text == "after the gate"
    (recorded,) = fake.requests
    assert recorded.completed.is_set()
    assert not recorded.disconnected.is_set()


@pytest.mark.asyncio
async def test_stop_cuts_off_a_hung_stream_promptly() -> None:
    async with FakeAnthropic() as server:
        server.enqueue(HangReply(after_events=1))
        async with make_client(server) as client:
            stream = await client.messages.create(model=MODEL, max_tokens=5, messages=user("x"), stream=True)
            await stream.__anext__()
            started = time.monotonic()
            await server.stop()
            assert time.monotonic() - started < 5
            with pytest.raises((anthropic.APIError, httpx2.HTTPError)):
                async for _ in stream:
                    pass
            await stream.close()


@pytest.mark.asyncio
async def test_responder_answers_50_concurrent_sessions_by_content(fake: FakeAnthropic) -> None:
    async def respond(request: RecordedRequest) -> ReplyLike:
        await asyncio.sleep(0.01)
        return TextReply(f"echo:{request.last_user_text}", delay_between_events=0.001)

    fake.responder = respond
    fake.enqueue(TextReply("never used"))  # the responder overrides the queue

    async with make_client(fake) as client:

        async def session(i: int) -> str:
            async with client.messages.stream(model=MODEL, max_tokens=10, messages=user(f"s{i}")) as stream:
                return await stream.get_final_text()

        results = await asyncio.gather(*(session(i) for i in range(50)))
    assert results == [f"echo:s{i}" for i in range(50)]
    assert len(fake.requests) == 50
    assert fake.pending_replies == 1


@pytest.mark.asyncio
async def test_text_deltas_helper_streams_exactly_n_deltas(fake: FakeAnthropic) -> None:
    fake.default_reply = text_deltas(1000)
    async with make_client(fake) as client:
        stream = await client.messages.create(model=MODEL, max_tokens=5, messages=user("x"), stream=True)
        deltas = [
            e.delta.text async for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta"
        ]
    assert deltas == [f"t{i} " for i in range(1000)]


def test_thread_mode_from_sync_code() -> None:
    with FakeAnthropicThread() as fake:
        fake.enqueue(
            ErrorReply(503, times=1, retry_after=0.01),
            TextReply("from a thread", chunks=["from ", "a ", "thread"]),
        )
        with anthropic.Anthropic(base_url=fake.base_url, api_key="k", max_retries=1) as client:
            with client.messages.stream(model=MODEL, max_tokens=5, messages=user("sync")) as stream:
                texts = list(stream.text_stream)
            message = client.messages.create(model=MODEL, max_tokens=5, messages=user("again"))
        assert texts == ["from ", "a ", "thread"]
        assert message.content[0].type == "text"
        assert message.content[0].text == "ok"
        recorded = fake.wait_for_requests(3, timeout=5)
        assert [r.status for r in recorded] == [503, 200, 200]
        assert recorded[-1].last_user_text == "again"
        with pytest.raises(TimeoutError):
            fake.wait_for_requests(4, timeout=0.05)


def test_thread_mode_hang_and_disconnect_from_sync_code() -> None:
    with FakeAnthropicThread() as fake:
        hang = HangReply(after_events=1)
        fake.enqueue(hang)
        with anthropic.Anthropic(base_url=fake.base_url, api_key="k", max_retries=0) as client:
            stream = client.messages.create(model=MODEL, max_tokens=5, messages=user("x"), stream=True)
            assert next(iter(stream)).type == "message_start"
            stream.close()
        (recorded,) = fake.wait_for_requests(1)
        assert recorded.disconnected.wait_blocking(5)


@pytest.fixture
def cli_server(tmp_path: Path) -> Iterator[str]:
    ready = tmp_path / "ready.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC_DIR), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "general_agent.testing.fake_anthropic",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--deltas",
            "25",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "fake did not write its ready file"
            time.sleep(0.02)
        yield json.loads(ready.read_text())["base_url"]
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert stderr == b""  # no runpy double-import warning, no tracebacks


def test_cli_process_mode(cli_server: str) -> None:
    assert cli_server.startswith("http://127.0.0.1:")
    with anthropic.Anthropic(base_url=cli_server, api_key="k", max_retries=0) as client:
        stream = client.messages.create(model=MODEL, max_tokens=5, messages=user("x"), stream=True)
        deltas = [e.delta.text for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert len(deltas) == 25


async def test_tool_round_script_answers_by_request_content(fake: FakeAnthropic) -> None:
    from general_agent.testing.fake_anthropic import tool_round_responder

    fake.responder = tool_round_responder
    async with make_client(fake) as client:
        first = await client.messages.create(model=MODEL, max_tokens=5, messages=user("go"))
        assert first.stop_reason == "tool_use"
        (call,) = first.content
        assert call.type == "tool_use"
        assert (call.name, call.input) == ("read", {"path": "bench.txt"})
        second = await client.messages.create(
            model=MODEL,
            max_tokens=5,
            messages=[
                *user("go"),
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": call.id, "name": "read", "input": call.input}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "1\tx"}]},
            ],
        )
        again = await client.messages.create(model=MODEL, max_tokens=5, messages=user("go"))
    assert second.stop_reason == "end_turn"
    assert [b.text for b in second.content if b.type == "text"] == ["done"]
    (repeat,) = again.content
    assert repeat.type == "tool_use"
    assert repeat.id != call.id  # a fresh id per request
