"""The ModelClient conformance suite: what the agent loop relies on from any model client.

Subclass `ModelClientConformance` in a test module (the class name must start with `Test` for pytest to
collect it) and implement `client_for(answers)`, which returns a client that will answer the given scripted
answers in order (general_agent_server.model.scripted describes them). The suite needs pytest and
pytest-asyncio (asyncio mode "auto", or mark the class). tests/conformance runs it against the scripted
client and against the Anthropic adapter talking to the repository's fake Anthropic server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from general_agent_server.domain.session import Usage
from general_agent_server.model.port import (
    Credential,
    MessageComplete,
    ModelCallError,
    ModelClient,
    ModelRequest,
    ModelStreamEvent,
    TextDelta,
    ThinkingBlockEnd,
    ThinkingDelta,
)
from general_agent_server.model.scripted import Answer, Failure, Hang, Reply, Text, Thinking, ToolUse

REQUEST = ModelRequest(
    model="claude-sonnet-4-6",
    max_tokens=1024,
    system=[],
    messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
)
CREDENTIAL = Credential(api_key="sk-ant-conformance-key-000000")


def usage(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1)


class ModelClientConformance:
    """Every ModelClient streams deltas as they come, flags the first delta of each block, ends with one
    MessageComplete holding the whole message, and raises ModelCallError (retryable only for failures after
    the response started) without ever yielding a MessageComplete for a failed call."""

    # The credential calls are made with; an implementation that needs a base URL overrides it.
    credential = CREDENTIAL

    async def client_for(self, answers: Sequence[Answer]) -> ModelClient:
        raise NotImplementedError

    async def collect(self, client: ModelClient) -> list[ModelStreamEvent]:
        return [event async for event in client.stream(REQUEST, self.credential)]

    async def test_text_streams_deltas_then_the_whole_message(self) -> None:
        reply = Reply(blocks=[Text(text="Hello, world", chunks=("Hel", "lo, ", "world"))], usage=usage(12, 3))
        events = await self.collect(await self.client_for([reply]))
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert [d.text for d in deltas] == ["Hel", "lo, ", "world"]
        assert [d.first for d in deltas] == [True, False, False]
        complete = events[-1]
        assert isinstance(complete, MessageComplete)
        assert complete.content == [{"type": "text", "text": "Hello, world"}]
        assert complete.stop_reason == "end_turn"
        assert (complete.usage.input_tokens, complete.usage.output_tokens, complete.usage.model_calls) == (12, 3, 1)
        assert sum(isinstance(e, MessageComplete) for e in events) == 1

    async def test_thinking_comes_before_the_text_with_its_signature(self) -> None:
        reply = Reply(
            blocks=[Thinking(thinking="2+2 is 4", signature="sig-1", chunks=("2+2 ", "is 4")), Text(text="4")]
        )
        events = await self.collect(await self.client_for([reply]))
        kinds = [type(e).__name__ for e in events]
        assert kinds == ["ThinkingDelta", "ThinkingDelta", "ThinkingBlockEnd", "TextDelta", "MessageComplete"]
        thinking = [e for e in events if isinstance(e, ThinkingDelta)]
        assert [t.first for t in thinking] == [True, False]
        assert isinstance(events[2], ThinkingBlockEnd)
        complete = events[-1]
        assert isinstance(complete, MessageComplete)
        assert complete.content == [
            {"type": "thinking", "thinking": "2+2 is 4", "signature": "sig-1"},
            {"type": "text", "text": "4"},
        ]

    async def test_tool_calls_arrive_whole_in_the_message(self) -> None:
        reply = Reply(blocks=[Text(text="Looking."), ToolUse(id="toolu_1", name="read", input={"path": "a", "n": 3})])
        events = await self.collect(await self.client_for([reply]))
        complete = events[-1]
        assert isinstance(complete, MessageComplete)
        assert complete.stop_reason == "tool_use"
        assert complete.content[1] == {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "read",
            "input": {"path": "a", "n": 3},
        }

    async def test_a_failure_before_the_response_is_not_retryable_here(self) -> None:
        client = await self.client_for([Failure(http_status=400, error_type="invalid_request_error", message="bad")])
        with pytest.raises(ModelCallError) as failure:
            await self.collect(client)
        assert failure.value.http_status == 400
        assert failure.value.retryable is False
        assert "bad" in failure.value.message

    async def test_a_failure_mid_stream_is_retryable_and_never_completes(self) -> None:
        partial = Reply(blocks=[Text(text="half", chunks=("ha", "lf")), Text(text="never")])
        client = await self.client_for([Failure(after_blocks=1, partial=partial, error_type="overloaded_error")])
        seen: list[ModelStreamEvent] = []

        async def consume() -> None:
            async for event in client.stream(REQUEST, self.credential):
                seen.append(event)

        with pytest.raises(ModelCallError) as failure:
            await consume()
        assert [e.text for e in seen if isinstance(e, TextDelta)] == ["ha", "lf"]
        assert not any(isinstance(e, MessageComplete) for e in seen)
        assert failure.value.retryable is True
        assert failure.value.error_type == "overloaded_error"

    async def test_cancelling_a_call_in_flight_ends_it_promptly(self) -> None:
        client = await self.client_for([Hang(reply=Reply(blocks=[Text(text="slow")]), after_blocks=0)])
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in client.stream(REQUEST, self.credential):
                started.set()

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)  # the call is in flight (nothing to wait on: the hang yields nothing)
        task.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert not started.is_set()
