"""What a test scripts the fake to answer: content blocks, the successful reply types and the failing ones
(HTTP errors, mid-stream errors, hung and cut streams)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from .signals import ThreadSafeEvent

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


_WORD_RE: Final = re.compile(r"\s*\S+\s*|\s+")


def _split_words(text: str) -> list[str]:
    """Split text into word-sized pieces, roughly how the real API chunks deltas."""
    return _WORD_RE.findall(text)


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
