"""A scripted fake of the Anthropic Messages API, for tests and benchmarks.

Why this exists: the service under test talks to Anthropic through the official
``anthropic`` SDK. Mocking the SDK in-process would skip the parts that break in
practice (SSE framing, retries on 429/5xx/529, stream accumulation, client-side
cancellation), and the real API is neither free, deterministic nor reachable
from CI. So this module serves the *real wire format* over loopback HTTP, and a
test points the real client at it with
``AsyncAnthropic(base_url=fake.base_url, api_key="test")``.

Three ways to run it:

* :class:`FakeAnthropic` -- inside the test's own event loop (``async with``).
* :class:`FakeAnthropicThread` -- its own event loop in a daemon thread, for
  sync tests and for tests whose server under test is a subprocess.
* ``python -m general_agent.testing.fake_anthropic --port 0 --ready-file PATH``
  -- a separate process with a fixed reply (or, with ``--script tool_round``,
  :func:`tool_round_responder`), for benchmarks that pin the fake to its own
  core so it does not steal CPU from the code being measured.

Scripting: replies are consumed FIFO, one per ``POST /v1/messages``
(:meth:`FakeAnthropic.enqueue`); when the queue is empty ``default_reply`` is
used; a ``responder`` callable overrides both so many concurrent sessions can be
answered by looking at each request. Every request is recorded
(:class:`RecordedRequest`), including the ones the fake rejects.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeAlias

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = [
    "Block",
    "CutStreamReply",
    "ErrorReply",
    "FakeAnthropic",
    "FakeAnthropicThread",
    "HangReply",
    "RecordedRequest",
    "RedactedThinkingBlock",
    "Reply",
    "ReplyLike",
    "Responder",
    "StreamErrorReply",
    "TextBlock",
    "TextReply",
    "ThinkingBlock",
    "ThreadSafeEvent",
    "ToolUseBlock",
    "Usage",
    "estimate_tokens",
    "main",
    "text_deltas",
    "tool_round_responder",
]

JSONDict: TypeAlias = dict[str, Any]

MESSAGES_PATH: Final = "/v1/messages"
COUNT_TOKENS_PATH: Final = "/v1/messages/count_tokens"

# The real API caps a request at 32 MB and answers 413 request_too_large above it.
MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024

# Anthropic's documented error types and the HTTP status each one comes with.
ERROR_STATUS: Final[Mapping[str, int]] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_STATUS_ERROR: Final[Mapping[int, str]] = {v: k for k, v in ERROR_STATUS.items()}

# How often a hung stream checks whether its client went away or the server is
# stopping. aiohttp also cancels the handler on disconnect; this is the fallback.
_HANG_POLL_SECONDS: Final = 0.05


# --------------------------------------------------------------------------- #
# Thread-safe signalling
# --------------------------------------------------------------------------- #


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ThreadSafeEvent:
    """A one-shot flag that can be set from any thread and awaited from any loop.

    Why not ``asyncio.Event``: that is bound to one loop and is not thread-safe,
    but :class:`FakeAnthropicThread` serves on its own loop while the test sets
    gates and waits for disconnects from another thread (or another loop).
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.set_at: float | None = None
        """``time.monotonic()`` when :meth:`set` was first called, else ``None``."""

    def is_set(self) -> bool:
        """Whether :meth:`set` has been called."""
        return self._flag.is_set()

    def set(self) -> None:
        """Set the flag and wake every waiter, whatever thread or loop it is on."""
        with self._lock:
            if self._flag.is_set():
                return
            self.set_at = time.monotonic()
            self._flag.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            # The waiter's loop may already be closed; then nobody is waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, fut)

    async def wait(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait in the running loop until set; return whether it is set.

        Takes a timeout (rather than leaving it to ``asyncio.timeout``) because
        "not set in time" is an answer here, not an error.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._flag.is_set():
                return True
            fut: asyncio.Future[None] = loop.create_future()
            entry = (loop, fut)
            self._waiters.append(entry)
        try:
            if timeout is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(fut, timeout)
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(entry)
        return self._flag.is_set()

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """Block the calling thread until set; return whether it is set."""
        return self._flag.wait(timeout)

    def __repr__(self) -> str:
        return f"ThreadSafeEvent(set={self.is_set()})"


# --------------------------------------------------------------------------- #
# Reply scripting types
# --------------------------------------------------------------------------- #

_WORD_RE: Final = re.compile(r"\s*\S+\s*|\s+")


def _split_words(text: str) -> list[str]:
    """Split text into word-sized pieces, roughly how the real API chunks deltas."""
    return _WORD_RE.findall(text)


def _split_even(text: str, parts: int) -> list[str]:
    """Split text into ``parts`` contiguous pieces of near-equal length."""
    parts = max(1, min(parts, len(text)))
    size, extra = divmod(len(text), parts)
    out: list[str] = []
    pos = 0
    for i in range(parts):
        end = pos + size + (1 if i < extra else 0)
        out.append(text[pos:end])
        pos = end
    return out


def estimate_tokens(value: object) -> int:
    """Crude token estimate: a quarter of the compact JSON length, at least 1.

    Why: counts only need to be plausible and deterministic for tests and for
    code that budgets context; no tokenizer is shipped with the SDK.
    """
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return max(1, len(text) // 4)


@dataclass(frozen=True)
class Usage:
    """Token counts reported in ``message_start`` / ``message_delta`` / the Message.

    ``None`` means "estimate it": input from the request JSON, output from the
    reply's content, so unscripted replies still carry believable numbers.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True)
class TextBlock:
    """A ``text`` content block, streamed as ``text_delta`` events.

    ``chunks`` fixes the exact deltas (their concatenation must equal ``text``);
    by default the text is split into word-sized deltas.
    """

    text: str
    chunks: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.chunks is not None and "".join(self.chunks) != self.text:
            raise ValueError("TextBlock.chunks must concatenate to TextBlock.text")

    def deltas(self) -> list[str]:
        """The text deltas this block is streamed as."""
        return list(self.chunks) if self.chunks is not None else _split_words(self.text)


@dataclass(frozen=True)
class ThinkingBlock:
    """A ``thinking`` block: ``thinking_delta`` events, then one ``signature_delta``."""

    thinking: str
    signature: str = "sig"
    chunks: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.chunks is not None and "".join(self.chunks) != self.thinking:
            raise ValueError("ThinkingBlock.chunks must concatenate to ThinkingBlock.thinking")

    def deltas(self) -> list[str]:
        """The thinking deltas this block is streamed as."""
        return list(self.chunks) if self.chunks is not None else _split_words(self.thinking)


@dataclass(frozen=True)
class RedactedThinkingBlock:
    """A ``redacted_thinking`` block: sent whole in ``content_block_start``, no deltas."""

    data: str = "redacted"


@dataclass(frozen=True)
class ToolUseBlock:
    """A ``tool_use`` block whose input is streamed as ``input_json_delta`` chunks.

    ``json_chunks`` splits the input's JSON into that many ``partial_json``
    pieces, so a client that parses each fragment on its own is caught out.
    """

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    json_chunks: int = 3

    def input_json(self) -> str:
        """The tool input as compact JSON, exactly as it is streamed."""
        return json.dumps(dict(self.input), separators=(",", ":"), ensure_ascii=False)


Block: TypeAlias = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock


@dataclass(frozen=True)
class Reply:
    """A successful assistant message, streamed or returned whole.

    ``stop_reason=None`` picks ``"tool_use"`` when a tool block is present, else
    ``"end_turn"``. ``delay_between_events`` sleeps after each SSE frame, to
    simulate a slow model. ``ping`` sends one ``ping`` event after the first
    ``content_block_start``, as the real API does. ``model=None`` echoes the
    requested model.
    """

    blocks: Sequence[Block] = ()
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: Usage = Usage()
    delay_between_events: float = 0.0
    ping: bool = True
    model: str | None = None

    def to_reply(self) -> Reply:
        """Return itself; lets every successful reply type be normalised alike."""
        return self

    def resolved_stop_reason(self) -> str:
        """The stop reason actually sent."""
        if self.stop_reason is not None:
            return self.stop_reason
        if any(isinstance(b, ToolUseBlock) for b in self.blocks):
            return "tool_use"
        return "end_turn"


@dataclass(frozen=True)
class TextReply:
    """Shorthand for the common case: optional thinking, then one text block."""

    text: str
    chunks: Sequence[str] | None = None
    thinking: str | None = None
    signature: str = "sig"
    stop_reason: str = "end_turn"
    usage: Usage = Usage()
    delay_between_events: float = 0.0
    ping: bool = True
    thinking_chunks: Sequence[str] | None = None

    def to_reply(self) -> Reply:
        """Expand into the general :class:`Reply`."""
        blocks: list[Block] = []
        if self.thinking is not None:
            blocks.append(ThinkingBlock(self.thinking, self.signature, self.thinking_chunks))
        blocks.append(TextBlock(self.text, self.chunks))
        return Reply(
            blocks=tuple(blocks),
            stop_reason=self.stop_reason,
            usage=self.usage,
            delay_between_events=self.delay_between_events,
            ping=self.ping,
        )


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with Anthropic's error body, served for ``times`` requests in a row.

    Why ``times``: the SDK retries 408/409/429/5xx/529 by itself, so a test says
    "fail twice then succeed" as ``enqueue(ErrorReply(529, times=2), TextReply("hi"))``.
    ``error_type``/``message`` default from the status. ``retry_after`` (seconds)
    sets ``retry-after``/``retry-after-ms``, which the SDK honours instead of its
    own backoff, keeping retry tests fast. ``should_retry`` sets
    ``x-should-retry``, which overrides the SDK's status-based decision.
    """

    status: int = 529
    error_type: str | None = None
    message: str | None = None
    times: int = 1
    retry_after: float | None = None
    should_retry: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.times < 1:
            raise ValueError("ErrorReply.times must be >= 1")

    def resolved_error_type(self) -> str:
        """The ``error.type`` sent."""
        if self.error_type is not None:
            return self.error_type
        if self.status in _STATUS_ERROR:
            return _STATUS_ERROR[self.status]
        return "api_error" if self.status >= 500 else "invalid_request_error"

    def resolved_message(self) -> str:
        """The ``error.message`` sent."""
        if self.message is not None:
            return self.message
        return self.resolved_error_type().replace("_", " ").capitalize()


@dataclass(frozen=True)
class StreamErrorReply:
    """A stream that fails part-way with an SSE ``event: error`` frame.

    The real API does this once it has answered 200 (e.g. ``overloaded_error``
    mid-generation), and the SDK raises it from the iterator rather than
    retrying. ``message_start`` and the first ``after_blocks`` blocks of
    ``reply`` are sent complete, then the error, then the connection ends.
    ``reply=None`` uses ``after_blocks`` text blocks reading ``"partial "``.
    A non-streaming request gets the matching HTTP error instead.
    """

    after_blocks: int = 0
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    reply: Reply | TextReply | None = None

    def base_reply(self) -> Reply:
        """The reply whose first blocks are streamed before the error."""
        if self.reply is not None:
            return self.reply.to_reply()
        return Reply(blocks=tuple(TextBlock("partial ") for _ in range(self.after_blocks)))


@dataclass(frozen=True)
class HangReply:
    """A stream that sends its first ``after_events`` SSE events, then waits on ``gate``.

    Why: cancel/stop tests need a request that is provably in flight. Call
    :meth:`release` (thread-safe) to let the rest of ``reply`` through, or never
    release it and have the client cancel; the fake then sets the request's
    ``disconnected`` flag. A non-streaming request waits on the gate before
    answering. Event counting includes ``message_start`` and ``ping``.
    """

    after_events: int = 1
    reply: Reply | TextReply | None = None
    gate: ThreadSafeEvent = field(default_factory=ThreadSafeEvent, compare=False)

    def release(self) -> None:
        """Let the hung stream continue; safe from any thread."""
        self.gate.set()

    def base_reply(self) -> Reply:
        """The reply streamed around the hang."""
        return (self.reply or TextReply("ok")).to_reply()


@dataclass(frozen=True)
class CutStreamReply:
    """A stream whose connection ends part-way, without ``message_stop``.

    What a dropped connection or a proxy that closes early looks like to the
    client: the first ``after_events`` SSE events of ``reply`` (``message_start``
    and ``ping`` included), then the end of the body. With ``garbage`` set, one
    undecodable ``content_block_delta`` frame is sent before the end instead (a
    malformed stream). A non-streaming request gets a 500.
    """

    after_events: int = 3
    reply: Reply | TextReply | None = None
    garbage: bool = False

    def base_reply(self) -> Reply:
        """The reply whose first events are streamed before the cut."""
        return (self.reply or TextReply("partial answer that never ends")).to_reply()


ReplyLike: TypeAlias = Reply | TextReply | ErrorReply | StreamErrorReply | HangReply | CutStreamReply


def text_deltas(n: int, delta: str | None = None, *, usage: Usage = Usage()) -> TextReply:
    """A text reply streamed as exactly ``n`` ``text_delta`` events.

    Each delta is ``delta`` if given, else ``"t{i} "`` so order is checkable.
    Used by the many-delta streaming benchmark.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    chunks = [delta if delta is not None else f"t{i} " for i in range(n)]
    return TextReply("".join(chunks), chunks=chunks, usage=usage)


TOOL_ROUND_PATH: Final = "bench.txt"
TOOL_ROUND_TEXT: Final = "done"


def tool_round_responder(rec: RecordedRequest) -> ReplyLike:
    """One tool round, decided from the request alone (stateless, so concurrent sessions work).

    A request whose last message carries a ``tool_result`` block gets the text
    ``"done"``; any other request gets a ``tool_use`` of the built-in ``read``
    tool on ``bench.txt`` (a fresh ``toolu_`` id each time). Used by the
    tool-round-trip benchmark (``--script tool_round``).
    """
    messages = rec.messages
    content = messages[-1].get("content") if messages else None
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return TextReply(TOOL_ROUND_TEXT)
    call = ToolUseBlock(id=f"toolu_fake_{uuid.uuid4().hex[:24]}", name="read", input={"path": TOOL_ROUND_PATH})
    return Reply(blocks=(call,))


# --------------------------------------------------------------------------- #
# Recording
# --------------------------------------------------------------------------- #


def _text_of(content: object) -> str:
    """Join the text of a string-or-blocks content value (system or message)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(parts)
    return ""


@dataclass(eq=False)
class RecordedRequest:
    """One request the fake received, kept even when it was rejected.

    ``disconnected`` is set when the client went away before the reply was
    complete; ``completed`` when the whole reply was sent.
    """

    index: int
    method: str
    path: str
    headers: Mapping[str, str]
    raw_body: bytes
    body: JSONDict
    request_id: str
    received_at: float
    disconnected: ThreadSafeEvent = field(default_factory=ThreadSafeEvent)
    completed: ThreadSafeEvent = field(default_factory=ThreadSafeEvent)
    reply: ReplyLike | None = None
    """The scripted reply served, or ``None`` if the request was rejected."""
    status: int | None = None
    """The HTTP status answered, once known."""

    @property
    def model(self) -> str | None:
        """The requested ``model``."""
        value = self.body.get("model")
        return value if isinstance(value, str) else None

    @property
    def api_key(self) -> str | None:
        """The credential sent: ``x-api-key``, else the ``Authorization: Bearer`` token.

        The SDK sends an ``api_key`` as a Bearer token, so tests should not care which.
        """
        key = self.headers.get("x-api-key")
        if key:
            return key
        auth = self.headers.get("authorization", "")
        return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None

    @property
    def stream(self) -> bool:
        """Whether the client asked for SSE streaming."""
        return self.body.get("stream") is True

    @property
    def max_tokens(self) -> int | None:
        """The requested ``max_tokens``."""
        value = self.body.get("max_tokens")
        return value if isinstance(value, int) else None

    @property
    def messages(self) -> list[JSONDict]:
        """The ``messages`` array (empty if missing)."""
        value = self.body.get("messages")
        return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []

    @property
    def tools(self) -> list[JSONDict]:
        """The ``tools`` array (empty if missing)."""
        value = self.body.get("tools")
        return [t for t in value if isinstance(t, dict)] if isinstance(value, list) else []

    @property
    def system_text(self) -> str:
        """The system prompt as one string, whether sent as a string or text blocks (joined by newlines)."""
        return _text_of(self.body.get("system"))

    @property
    def last_user_text(self) -> str:
        """The text of the last ``user`` message (text blocks joined by newlines; ``""`` if none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""


# --------------------------------------------------------------------------- #
# Wire format
# --------------------------------------------------------------------------- #


def _dumps(data: object) -> str:
    # Compact separators and raw UTF-8, as the real API emits.
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def sse_frame(event: str, data: JSONDict) -> bytes:
    """One SSE frame, ``event: <type>\\ndata: <json>\\n\\n``, as Anthropic sends it."""
    return f"event: {event}\ndata: {_dumps(data)}\n\n".encode()


def _error_body(error_type: str, message: str, request_id: str) -> JSONDict:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def _output_estimate(reply: Reply) -> int:
    total = 0
    for block in reply.blocks:
        if isinstance(block, TextBlock):
            total += len(block.text)
        elif isinstance(block, ThinkingBlock):
            total += len(block.thinking)
        elif isinstance(block, ToolUseBlock):
            total += len(block.input_json())
    return max(1, total // 4) if reply.blocks else 0


@dataclass(frozen=True)
class _ResolvedUsage:
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    def as_dict(self, output_tokens: int | None = None) -> JSONDict:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "output_tokens": self.output_tokens if output_tokens is None else output_tokens,
        }


class PromptCache:
    """Anthropic's prompt caching, as far as token accounting goes: a request's prefix up to a block marked
    ``cache_control`` is written to the cache; a later request whose prefix (tools, then system, then messages)
    matches a written one, at a breakpoint or up to 20 blocks before it, reads it back. The markers themselves
    are not part of what is compared, so a breakpoint that moves to the newest message still hits."""

    LOOKBACK = 20

    def __init__(self) -> None:
        self._written: set[str] = set()

    def usage(self, body: JSONDict) -> tuple[int, int]:
        """``(cache_read_input_tokens, cache_creation_input_tokens)`` of a request, recording what it writes."""
        items: list[tuple[str, bool]] = []
        for tool in body.get("tools") or []:
            items.append(self._item(tool))
        system = body.get("system")
        for block in system if isinstance(system, list) else ([{"type": "text", "text": system}] if system else []):
            items.append(self._item(block))
        for message in body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
                items.append(self._item({"role": message.get("role"), **block}))
        digests, sizes, digest, size = [], [], hashlib.sha256(), 0
        for text, _ in items:
            digest.update(text.encode())
            size += len(text)
            digests.append(digest.hexdigest())
            sizes.append(size)
        breakpoints = [i for i, (_, marked) in enumerate(items) if marked]
        read = 0
        for point in reversed(breakpoints):
            hit = next(
                (i for i in range(point, max(-1, point - self.LOOKBACK), -1) if digests[i] in self._written), None
            )
            if hit is not None:
                read = max(read, sizes[hit] // 4)
        written = sizes[breakpoints[-1]] // 4 if breakpoints else 0
        self._written.update(digests[i] for i in breakpoints)
        return read, max(0, written - read)

    @staticmethod
    def _item(block: JSONDict) -> tuple[str, bool]:
        marked = "cache_control" in block
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        return json.dumps(plain, sort_keys=True, separators=(",", ":")), marked


def _resolve_usage(reply: Reply, rec: RecordedRequest, cache: PromptCache | None = None) -> _ResolvedUsage:
    u = reply.usage
    read, creation = u.cache_read_input_tokens, u.cache_creation_input_tokens
    input_tokens = u.input_tokens
    if input_tokens is None:
        input_tokens = estimate_tokens(rec.body)
        if cache is not None and not (read or creation):
            read, creation = cache.usage(rec.body)
            input_tokens = max(1, input_tokens - read - creation)
    return _ResolvedUsage(
        input_tokens=input_tokens,
        output_tokens=u.output_tokens if u.output_tokens is not None else _output_estimate(reply),
        cache_creation_input_tokens=creation,
        cache_read_input_tokens=read,
    )


def _block_json(block: Block) -> JSONDict:
    """A content block as it appears in a non-streamed Message."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}


def _block_events(index: int, block: Block) -> list[tuple[str, JSONDict]]:
    """The ``content_block_start``/``_delta``/``_stop`` events for one block."""

    def delta(payload: JSONDict) -> tuple[str, JSONDict]:
        return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload})

    start: JSONDict
    deltas: list[tuple[str, JSONDict]] = []
    if isinstance(block, TextBlock):
        start = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": t}) for t in block.deltas()]
    elif isinstance(block, ThinkingBlock):
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [delta({"type": "thinking_delta", "thinking": t}) for t in block.deltas()]
        deltas.append(delta({"type": "signature_delta", "signature": block.signature}))
    elif isinstance(block, RedactedThinkingBlock):
        start = {"type": "redacted_thinking", "data": block.data}
    else:
        start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        deltas = [
            delta({"type": "input_json_delta", "partial_json": piece})
            for piece in _split_even(block.input_json(), block.json_chunks)
        ]
    return [
        ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        *deltas,
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


class _Message:
    """A reply resolved against one request: ids, model and usage fixed."""

    def __init__(self, reply: Reply, rec: RecordedRequest, cache: PromptCache | None = None) -> None:
        self.reply = reply
        self.id = f"msg_fake_{uuid.uuid4().hex[:24]}"
        self.model = reply.model or rec.model or "claude-fake"
        self.usage = _resolve_usage(reply, rec, cache)

    def full_json(self) -> JSONDict:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [_block_json(b) for b in self.reply.blocks],
            "stop_reason": self.reply.resolved_stop_reason(),
            "stop_sequence": self.reply.stop_sequence,
            "usage": self.usage.as_dict(),
        }

    def start_event(self) -> tuple[str, JSONDict]:
        message: JSONDict = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # The real API reports a token or so of output at the start.
            "usage": self.usage.as_dict(output_tokens=min(1, self.usage.output_tokens)),
        }
        return ("message_start", {"type": "message_start", "message": message})

    def block_events(self, limit: int | None = None) -> list[tuple[str, JSONDict]]:
        events: list[tuple[str, JSONDict]] = []
        blocks = self.reply.blocks if limit is None else self.reply.blocks[:limit]
        for i, block in enumerate(blocks):
            block_events = _block_events(i, block)
            events.extend(block_events)
            if i == 0 and self.reply.ping:
                # The real API slips a ping in after the first block opens.
                events.insert(1, ("ping", {"type": "ping"}))
        if not blocks and self.reply.ping:
            events.append(("ping", {"type": "ping"}))
        return events

    def end_events(self) -> list[tuple[str, JSONDict]]:
        return [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": self.reply.resolved_stop_reason(),
                        "stop_sequence": self.reply.stop_sequence,
                    },
                    # Cumulative totals, as the current API sends them.
                    "usage": self.usage.as_dict(),
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]

    def all_events(self) -> list[tuple[str, JSONDict]]:
        return [self.start_event(), *self.block_events(), *self.end_events()]


# --------------------------------------------------------------------------- #
# The server
# --------------------------------------------------------------------------- #

Responder: TypeAlias = Callable[[RecordedRequest], ReplyLike | Awaitable[ReplyLike]]


@dataclass
class _Queued:
    """A queue entry: the reply and how many more requests it answers."""

    reply: ReplyLike
    uses: int


class _ClientGone(Exception):
    """The client disconnected (or the server is stopping) while a stream was open."""


class FakeAnthropic:
    """The fake API server, running in the caller's event loop.

    All scripting state sits behind one lock, so :class:`FakeAnthropicThread`
    can drive an instance from another thread.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_reply: ReplyLike | None = None,
        responder: Responder | None = None,
        validate: bool = True,
        prompt_cache: bool = False,
    ) -> None:
        """Configure the server; nothing listens until :meth:`start`.

        ``validate`` checks auth and required fields like the real API; turn it
        off for clients that deliberately send odd requests. ``prompt_cache``
        reports cache reads and writes for requests with ``cache_control``
        breakpoints, as the real API does (:class:`PromptCache`); replies that
        script their own usage keep it.
        """
        self.prompt_cache = PromptCache() if prompt_cache else None
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._queue: deque[_Queued] = deque()
        self._default_reply: ReplyLike = default_reply if default_reply is not None else TextReply("ok")
        self._responder = responder
        self.validate = validate
        self._requests: list[RecordedRequest] = []
        self._all_requests: list[RecordedRequest] = []
        self._recorded_signal = ThreadSafeEvent()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------- #

    async def start(self) -> None:
        """Bind the port and start serving in the running loop."""
        if self._runner is not None:
            raise RuntimeError("FakeAnthropic already started")
        self._stopping = False
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that drops the connection cancels its
        # handler, which is how `disconnected` is noticed promptly.
        runner = web.AppRunner(
            app,
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        sock = socket.create_server((self._host, self._port))
        site = web.SockSite(runner, sock)
        try:
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        port = sock.getsockname()[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._runner = runner
        self._base_url = f"http://{host}:{port}"

    async def stop(self) -> None:
        """Stop serving; open streams (hung ones included) are cut off."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping = True
        await runner.cleanup()

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``), for ``AsyncAnthropic(base_url=...)``."""
        if self._base_url is None:
            raise RuntimeError("FakeAnthropic is not started")
        return self._base_url

    # -- scripting ---------------------------------------------------------- #

    def enqueue(self, *replies: ReplyLike) -> None:
        """Append replies to the FIFO; each ``POST /v1/messages`` consumes one.

        An :class:`ErrorReply` with ``times=N`` stays at the head for N requests.
        """
        with self._lock:
            for reply in replies:
                uses = reply.times if isinstance(reply, ErrorReply) else 1
                self._queue.append(_Queued(reply, uses))

    @property
    def default_reply(self) -> ReplyLike:
        """The reply used when the queue is empty and there is no responder."""
        with self._lock:
            return self._default_reply

    @default_reply.setter
    def default_reply(self, reply: ReplyLike) -> None:
        with self._lock:
            self._default_reply = reply

    @property
    def responder(self) -> Responder | None:
        """A callable choosing each reply from the request; overrides the queue.

        It runs on the server's loop (the server thread, in thread mode).
        """
        with self._lock:
            return self._responder

    @responder.setter
    def responder(self, responder: Responder | None) -> None:
        with self._lock:
            self._responder = responder

    @property
    def pending_replies(self) -> int:
        """How many scripted requests the queue still covers."""
        with self._lock:
            return sum(q.uses for q in self._queue)

    def clear(self) -> None:
        """Drop queued replies and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._all_requests.clear()

    # -- recording ---------------------------------------------------------- #

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of every ``POST /v1/messages`` received, in arrival order (rejected ones too)."""
        with self._lock:
            return list(self._requests)

    @property
    def all_requests(self) -> list[RecordedRequest]:
        """Snapshot of every request on any path (count_tokens, 404s, ...)."""
        with self._lock:
            return list(self._all_requests)

    async def wait_for_requests(
        self,
        n: int,
        timeout: float = 5.0,  # noqa: ASYNC109 - "not in time" is a test failure to report
    ) -> list[RecordedRequest]:
        """Wait until at least ``n`` message requests were recorded; return them.

        Raises ``TimeoutError`` naming how many arrived, so a hung test says why.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._requests) >= n:
                    return list(self._requests)
                signal_ = self._recorded_signal
                have = len(self._requests)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"expected {n} requests to the fake, got {have} in {timeout}s")
            await signal_.wait(remaining)

    def wait_for_requests_blocking(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Thread-blocking :meth:`wait_for_requests`, for sync callers."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._requests) >= n:
                    return list(self._requests)
                signal_ = self._recorded_signal
                have = len(self._requests)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"expected {n} requests to the fake, got {have} in {timeout}s")
            signal_.wait_blocking(remaining)

    def _record(self, rec: RecordedRequest, is_message: bool) -> None:
        with self._lock:
            rec.index = len(self._all_requests)
            self._all_requests.append(rec)
            if is_message:
                self._requests.append(rec)
            signal_, self._recorded_signal = self._recorded_signal, ThreadSafeEvent()
        signal_.set()

    async def _next_reply(self, rec: RecordedRequest) -> ReplyLike:
        with self._lock:
            responder = self._responder
            if responder is None:
                if self._queue:
                    head = self._queue[0]
                    head.uses -= 1
                    if head.uses <= 0:
                        self._queue.popleft()
                    return head.reply
                return self._default_reply
        result = responder(rec)
        if isinstance(result, Awaitable):
            return await result
        return result

    # -- HTTP --------------------------------------------------------------- #

    def _error(
        self,
        rec: RecordedRequest,
        status: int,
        error_type: str,
        message: str,
        extra_headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        rec.status = status
        headers = {"request-id": rec.request_id, **(extra_headers or {})}
        response = web.json_response(
            _error_body(error_type, message, rec.request_id),
            status=status,
            headers=headers,
            dumps=_dumps,
        )
        rec.completed.set()
        return response

    def _validate(self, rec: RecordedRequest, parse_ok: bool, *, count_tokens: bool) -> web.Response | None:
        if not rec.api_key:
            return self._error(rec, 401, "authentication_error", "x-api-key header is required")
        if not rec.headers.get("anthropic-version"):
            return self._error(rec, 400, "invalid_request_error", "anthropic-version: header is required")
        if not parse_ok:
            return self._error(rec, 400, "invalid_request_error", "There was an error parsing the body of your request")
        required = ("model", "messages") if count_tokens else ("model", "max_tokens", "messages")
        for name in required:
            if name not in rec.body:
                return self._error(rec, 400, "invalid_request_error", f"{name}: Field required")
        if not isinstance(rec.body["messages"], list):
            return self._error(rec, 400, "invalid_request_error", "messages: Input should be a valid list")
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        request_id = f"req_fake_{uuid.uuid4().hex[:24]}"
        too_large = False
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raw, too_large = b"", True
        body: JSONDict = {}
        parse_ok = True
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
            parse_ok = False
        if isinstance(parsed, dict):
            body = parsed
        elif raw:
            parse_ok = False
        path = request.path
        is_message = path == MESSAGES_PATH
        rec = RecordedRequest(
            index=-1,
            method=request.method,
            path=path,
            headers=CIMultiDictProxy(CIMultiDict(request.headers)),
            raw_body=raw,
            body=body,
            request_id=request_id,
            received_at=time.monotonic(),
        )
        self._record(rec, is_message and request.method == "POST")

        if request.method != "POST" or path not in (MESSAGES_PATH, COUNT_TOKENS_PATH):
            return self._error(rec, 404, "not_found_error", "Not Found")
        if too_large:
            return self._error(rec, 413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
        if self.validate:
            rejected = self._validate(rec, parse_ok, count_tokens=not is_message)
            if rejected is not None:
                return rejected
        if not is_message:
            rec.status = 200
            response = web.json_response(
                {"input_tokens": estimate_tokens(rec.body)}, headers={"request-id": request_id}
            )
            rec.completed.set()
            return response

        reply = await self._next_reply(rec)
        rec.reply = reply
        return await self._serve(request, rec, reply)

    async def _serve(self, request: web.Request, rec: RecordedRequest, reply: ReplyLike) -> web.StreamResponse:
        if isinstance(reply, ErrorReply):
            headers = dict(reply.headers)
            if reply.retry_after is not None:
                headers["retry-after"] = str(max(0, math.ceil(reply.retry_after)))
                headers["retry-after-ms"] = str(max(0, round(reply.retry_after * 1000)))
            if reply.should_retry is not None:
                headers["x-should-retry"] = "true" if reply.should_retry else "false"
            return self._error(rec, reply.status, reply.resolved_error_type(), reply.resolved_message(), headers)

        if isinstance(reply, StreamErrorReply):
            if not rec.stream:
                status = ERROR_STATUS.get(reply.error_type, 500)
                return self._error(rec, status, reply.error_type, reply.message)
            msg = _Message(reply.base_reply(), rec, self.prompt_cache)
            events = [msg.start_event(), *msg.block_events(limit=reply.after_blocks)]
            events.append(("error", _error_body(reply.error_type, reply.message, rec.request_id)))
            return await self._stream(request, rec, events, delay=msg.reply.delay_between_events)

        if isinstance(reply, CutStreamReply):
            if not rec.stream:
                return self._error(rec, 500, "api_error", "Internal server error")
            msg = _Message(reply.base_reply(), rec, self.prompt_cache)
            events = msg.all_events()[: reply.after_events]
            return await self._stream(request, rec, events, delay=msg.reply.delay_between_events, garbage=reply.garbage)

        if isinstance(reply, HangReply):
            msg = _Message(reply.base_reply(), rec, self.prompt_cache)
            if not rec.stream:
                try:
                    await self._wait_gate(request, reply.gate)
                except _ClientGone:
                    return self._abort(request, rec)
                except asyncio.CancelledError:
                    self._note_gone(rec)
                    raise
                return self._json(rec, msg)
            return await self._stream(
                request,
                rec,
                msg.all_events(),
                delay=msg.reply.delay_between_events,
                hang_after=reply.after_events,
                gate=reply.gate,
            )

        msg = _Message(reply.to_reply(), rec, self.prompt_cache)
        if not rec.stream:
            return self._json(rec, msg)
        return await self._stream(request, rec, msg.all_events(), delay=msg.reply.delay_between_events)

    def _json(self, rec: RecordedRequest, msg: _Message) -> web.Response:
        rec.status = 200
        response = web.json_response(msg.full_json(), headers={"request-id": rec.request_id}, dumps=_dumps)
        rec.completed.set()
        return response

    def _note_gone(self, rec: RecordedRequest) -> None:
        if not self._stopping:
            rec.disconnected.set()

    def _abort(self, request: web.Request, rec: RecordedRequest) -> web.StreamResponse:
        self._note_gone(rec)
        if request.transport is not None:
            request.transport.close()
        return web.StreamResponse()

    async def _wait_gate(self, request: web.Request, gate: ThreadSafeEvent) -> None:
        while not await gate.wait(_HANG_POLL_SECONDS):
            transport = request.transport
            if self._stopping or transport is None or transport.is_closing():
                raise _ClientGone

    async def _stream(
        self,
        request: web.Request,
        rec: RecordedRequest,
        events: Sequence[tuple[str, JSONDict]],
        *,
        delay: float = 0.0,
        hang_after: int | None = None,
        gate: ThreadSafeEvent | None = None,
        garbage: bool = False,
    ) -> web.StreamResponse:
        rec.status = 200
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": rec.request_id,
            },
        )
        try:
            await response.prepare(request)
            for i, (event, data) in enumerate(events):
                if gate is not None and i == hang_after:
                    await self._wait_gate(request, gate)
                await response.write(sse_frame(event, data))
                if delay > 0:
                    await asyncio.sleep(delay)
            if gate is not None and hang_after is not None and hang_after >= len(events):
                await self._wait_gate(request, gate)
            if garbage:
                await response.write(b"event: content_block_delta\ndata: {not json\n\n")
            await response.write_eof()
        except (_ClientGone, ConnectionResetError):
            self._note_gone(rec)
            if request.transport is not None:
                request.transport.close()
            return response
        except asyncio.CancelledError:
            self._note_gone(rec)
            raise
        rec.completed.set()
        return response


# --------------------------------------------------------------------------- #
# Thread mode
# --------------------------------------------------------------------------- #


class FakeAnthropicThread:
    """:class:`FakeAnthropic` on its own event loop in a daemon thread, driven from sync code.

    Why: a sync test, or one whose server under test is a subprocess, has no
    loop of its own to run the fake on. The scripting API is the same and is
    thread-safe; ``responder`` runs on the fake's thread.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_reply: ReplyLike | None = None,
        responder: Responder | None = None,
        validate: bool = True,
    ) -> None:
        """Configure the server; nothing listens until :meth:`start`."""
        self.fake = FakeAnthropic(
            host=host, port=port, default_reply=default_reply, responder=responder, validate=validate
        )
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start the thread and block until the server is listening."""
        if self._thread is not None:
            raise RuntimeError("FakeAnthropicThread already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
            try:
                await self.fake.start()
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            try:
                await self._stop_event.wait()
            finally:
                await self.fake.stop()

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), name="fake-anthropic", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("fake Anthropic server did not start")
        if errors:
            self._thread.join()
            self._thread = None
            raise errors[0]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join its thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout)

    def __enter__(self) -> FakeAnthropicThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``)."""
        return self.fake.base_url

    def enqueue(self, *replies: ReplyLike) -> None:
        """See :meth:`FakeAnthropic.enqueue`."""
        self.fake.enqueue(*replies)

    @property
    def default_reply(self) -> ReplyLike:
        """See :attr:`FakeAnthropic.default_reply`."""
        return self.fake.default_reply

    @default_reply.setter
    def default_reply(self, reply: ReplyLike) -> None:
        self.fake.default_reply = reply

    @property
    def responder(self) -> Responder | None:
        """See :attr:`FakeAnthropic.responder`; it runs on the fake's thread."""
        return self.fake.responder

    @responder.setter
    def responder(self, responder: Responder | None) -> None:
        self.fake.responder = responder

    @property
    def pending_replies(self) -> int:
        """See :attr:`FakeAnthropic.pending_replies`."""
        return self.fake.pending_replies

    def clear(self) -> None:
        """See :meth:`FakeAnthropic.clear`."""
        self.fake.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """See :attr:`FakeAnthropic.requests`."""
        return self.fake.requests

    @property
    def all_requests(self) -> list[RecordedRequest]:
        """See :attr:`FakeAnthropic.all_requests`."""
        return self.fake.all_requests

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` message requests were recorded; return them."""
        return self.fake.wait_for_requests_blocking(n, timeout)


# --------------------------------------------------------------------------- #
# Process mode (CLI)
# --------------------------------------------------------------------------- #


# ``--script NAME``: a responder that picks each reply from the request.
_SCRIPTS: Final[Mapping[str, Responder]] = {"tool_round": tool_round_responder}


def _write_ready_file(path: Path, data: JSONDict) -> None:
    # Write-then-rename so a poller never reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(_dumps(data), encoding="utf-8")
    os.replace(tmp, path)


async def _serve_forever(args: argparse.Namespace) -> None:
    if args.deltas is not None:
        reply: ReplyLike = text_deltas(args.deltas, args.text)
    else:
        reply = TextReply(args.text if args.text is not None else "ok")
    responder = _SCRIPTS[args.script] if args.script is not None else None
    fake = FakeAnthropic(
        host=args.host, port=args.port, default_reply=reply, responder=responder, validate=not args.no_validate
    )
    await fake.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.ready_file is not None:
            _write_ready_file(Path(args.ready_file), {"base_url": fake.base_url, "pid": os.getpid()})
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a fixed default reply until SIGTERM/SIGINT.

    Why a process: benchmarks run the fake pinned to its own core so its CPU
    use does not distort what is being measured. ``--deltas N`` streams exactly
    N text deltas (each ``--text`` if given); otherwise ``--text`` (default
    ``ok``) is the reply. ``--script tool_round`` answers each request with
    :func:`tool_round_responder` instead (not combinable with ``--deltas`` or
    ``--text``). The ready file gets ``{"base_url": ..., "pid": ...}`` once the
    port is bound.
    """
    parser = argparse.ArgumentParser(
        prog="python -m general_agent.testing.fake_anthropic",
        description="Scripted fake Anthropic Messages API serving a fixed reply.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", help="write {'base_url': ...} here once listening")
    parser.add_argument("--deltas", type=int, help="reply with exactly N text deltas")
    parser.add_argument("--text", help="reply text, or each delta's text with --deltas")
    parser.add_argument(
        "--script",
        choices=sorted(_SCRIPTS),
        help="answer by inspecting each request: tool_round = tool_use of read(bench.txt), then 'done' "
        "after the tool_result",
    )
    parser.add_argument("--no-validate", action="store_true", help="skip auth/field checks")
    args = parser.parse_args(argv)
    if args.script is not None and (args.deltas is not None or args.text is not None):
        parser.error("--script cannot be combined with --deltas or --text")
    asyncio.run(_serve_forever(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
