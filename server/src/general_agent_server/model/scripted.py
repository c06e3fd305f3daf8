"""An in-process ModelClient that answers from a script: the agent loop's tests run through it in
milliseconds, with no HTTP server and no SDK. It passes the same conformance suite as the Anthropic adapter
(general_agent_server.model.testing), so what a loop test sees is what the real adapter would yield.

A script is a list of replies, answered in order; a callable answers from the request instead. Requests are
recorded, so a test asserts on exactly what the loop sent."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from general_agent_server.domain.session import Usage
from general_agent_server.model.port import (
    Credential,
    MessageComplete,
    ModelCallError,
    ModelRequest,
    ModelStreamEvent,
    TextDelta,
    ThinkingBlockEnd,
    ThinkingDelta,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Text:
    """A text block streamed as `chunks` (default: the whole text at once)."""

    text: str
    chunks: Sequence[str] = ()

    def deltas(self) -> Sequence[str]:
        return self.chunks or (self.text,)


@dataclass(frozen=True, kw_only=True, slots=True)
class Thinking:
    thinking: str
    signature: str = "sig"
    chunks: Sequence[str] = ()

    def deltas(self) -> Sequence[str]:
        return self.chunks or (self.thinking,)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)


Block = Text | Thinking | ToolUse


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """One assistant message. `stop_reason` defaults to tool_use when a tool is called, else end_turn."""

    blocks: Sequence[Block]
    stop_reason: str | None = None
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=10, output_tokens=5, model_calls=1))

    @property
    def resolved_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


def text(value: str, *chunks: str) -> Reply:
    return Reply(blocks=[Text(text=value, chunks=chunks)])


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """A failed call: raised before any event (`after_blocks=None`, as the SDK raises after its own retries),
    or after streaming the first `after_blocks` blocks of `partial` (a stream that broke mid-way)."""

    message: str = "provider unavailable"
    http_status: int | None = 529
    error_type: str = "overloaded_error"
    timeout: bool = False
    after_blocks: int | None = None
    partial: Reply | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Hang:
    """Streams the first `after_blocks` blocks of `reply`, then waits for `release` (a call in flight)."""

    reply: Reply
    after_blocks: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)


Answer = Reply | Failure | Hang
Responder = Callable[[ModelRequest], Answer]


class ScriptedModelClient:
    """Answers each call with the next scripted answer (or `responder(request)` once the script is empty)."""

    def __init__(self, answers: Iterable[Answer] = (), *, responder: Responder | None = None) -> None:
        self._answers: deque[Answer] = deque(answers)
        self._responder = responder
        self.requests: list[ModelRequest] = []
        self.credentials: list[Credential] = []
        self.cancelled = 0

    def enqueue(self, *answers: Answer) -> None:
        self._answers.extend(answers)

    def _next(self, request: ModelRequest) -> Answer:
        if self._answers:
            return self._answers.popleft()
        if self._responder is not None:
            return self._responder(request)
        return text("ok")

    async def stream(self, request: ModelRequest, credential: Credential) -> AsyncIterator[ModelStreamEvent]:
        self.requests.append(request)
        self.credentials.append(credential)
        answer = self._next(request)
        try:
            if isinstance(answer, Failure):
                async for event in self._fail(answer):
                    yield event
                return
            reply = answer.reply if isinstance(answer, Hang) else answer
            for index, block in enumerate(reply.blocks):
                if isinstance(answer, Hang) and index == answer.after_blocks:
                    await answer.release.wait()
                for event in _block_events(block):
                    yield event
                    await asyncio.sleep(0)  # a real stream yields to the loop between events
            if isinstance(answer, Hang) and answer.after_blocks >= len(reply.blocks):
                await answer.release.wait()
            yield _complete(reply)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _fail(self, failure: Failure) -> AsyncIterator[ModelStreamEvent]:
        mid_stream = failure.after_blocks is not None
        if failure.partial is not None and failure.after_blocks:
            for block in failure.partial.blocks[: failure.after_blocks]:
                for event in _block_events(block):
                    yield event
        raise ModelCallError(
            failure.message,
            http_status=failure.http_status,
            timeout=failure.timeout,
            error_type=failure.error_type,
            retryable=mid_stream,
        )

    async def close(self) -> None:
        self._answers.clear()


def _block_events(block: Block) -> list[ModelStreamEvent]:
    if isinstance(block, Text):
        return [TextDelta(text=chunk, first=i == 0) for i, chunk in enumerate(block.deltas())]
    if isinstance(block, Thinking):
        deltas: list[ModelStreamEvent] = [
            ThinkingDelta(text=chunk, first=i == 0) for i, chunk in enumerate(block.deltas())
        ]
        return [*deltas, ThinkingBlockEnd()]
    return []


def block_json(block: Block) -> dict[str, Any]:
    """A block as the Messages API returns it (and as the loop stores it in history)."""
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _complete(reply: Reply) -> MessageComplete:
    return MessageComplete(
        content=[block_json(b) for b in reply.blocks], stop_reason=reply.resolved_stop_reason, usage=reply.usage
    )
