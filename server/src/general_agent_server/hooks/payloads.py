"""History-carrying hook fields (docs/hooks.md, payloads): `messages` and `historyMessages` carry what each handler
asked for (`include_messages` NONE | LAST_N | ALL), with images replaced by `{mime_type, size}` and the list capped by
`max_payload_bytes` (oldest messages dropped first, `truncated` set).

The runner puts a `MessageHistory` in the event; each handler's copy is shaped just before the call, so
one dispatch serves handlers with different settings."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from general_agent_server.security.redaction import redact

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


class IncludeMessages(enum.Enum):
    NONE = "none"
    LAST_N = "last_n"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class MessageHistory:
    """Messages in the Anthropic Messages API shape, as the model saw them."""

    messages: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageSelection:
    include: IncludeMessages = IncludeMessages.NONE
    last_n: int = 0
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES


def shape_event(event: Mapping[str, Any], selection: MessageSelection) -> dict[str, Any]:
    """The event as one handler receives it: every MessageHistory becomes
    `{messageCount, messages, truncated}` (the proto JSON of HookMessages). Every payload a hook receives is
    built here, so this is where it is redacted."""
    shaped = {
        key: _payload(value, selection) if isinstance(value, MessageHistory) else value for key, value in event.items()
    }
    return redact(shaped)


def _payload(history: MessageHistory, selection: MessageSelection) -> dict[str, Any]:
    count = len(history.messages)
    chosen: Sequence[Mapping[str, Any]] = ()
    if selection.include is IncludeMessages.ALL:
        chosen = history.messages
    elif selection.include is IncludeMessages.LAST_N and selection.last_n > 0:
        chosen = history.messages[-selection.last_n :]
    kept = [without_images(m) for m in chosen]
    truncated = False
    # Drop the oldest until the list fits: the newest messages are the ones a hook usually needs.
    sizes = [len(json.dumps(m, separators=(",", ":"))) for m in kept]
    total = sum(sizes)
    while kept and total > selection.max_payload_bytes:
        total -= sizes.pop(0)
        kept.pop(0)
        truncated = True
    return {"messageCount": count, "messages": kept, "truncated": truncated}


def without_images(value: Any) -> Any:
    """Image blocks replaced by {type, mime_type, size}: hooks get the shape, never the bytes."""
    if isinstance(value, Mapping):
        if value.get("type") == "image" and isinstance(value.get("source"), Mapping):
            source = value["source"]
            data = source.get("data")
            # The decoded size, computed from the base64 length rather than by decoding megabytes.
            size = len(data) * 3 // 4 - data[-2:].count("=") if isinstance(data, str) else 0
            return {"type": "image", "mime_type": source.get("media_type", ""), "size": size}
        return {k: without_images(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_images(v) for v in value]
    return value
