"""The Messages API's wire format: its paths and limits, SSE frames, error bodies, usage, and a reply resolved
against one request into the Message or the stream events the real API would send."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Final

from .prompt_cache import PromptCache
from .recording import JSONDict, RecordedRequest
from .replies import (
    Block,
    RedactedThinkingBlock,
    Reply,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    estimate_tokens,
)

MESSAGES_PATH: Final = "/v1/messages"


COUNT_TOKENS_PATH: Final = "/v1/messages/count_tokens"


# The real API caps a request at 32 MB and answers 413 request_too_large above it.
MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024


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
