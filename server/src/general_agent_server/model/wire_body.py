"""The Messages API request body as JSON bytes, with what repeats between calls encoded once.

The calls of a session resend the same history and tool definitions; handed the body as objects, the SDK copies the
whole tree (`copy_tree`) and JSON-encodes it again on every call, a cost that grows with the history. Here the
history's closed messages come already encoded with the request (`ModelRequest.encoded_prefix`, kept per session by
model/history_encoding.py), each tools list is encoded once and kept by identity, and the body is joined from those
pieces and the few messages encoded for this call; the SDK sends the bytes as given (`client.post(content=...)`,
model/anthropic.py).

Identity is a safe key for a tools list because one is built once per tool set and never changed
(model/request_builder.py), and the kept entry holds its object, so an id is never reused while its entry exists.

The encoding is the SDK's own (compact separators, non-ASCII as is, NaN refused) with the keys in the order the
SDK's `messages.create` writes them, so the bytes equal what `messages.create(stream=True)` would send."""

from __future__ import annotations

import json
from typing import Final

from general_agent_server.model.port import ModelRequest

_encode: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

# How many tools lists are kept encoded before they are dropped (all at once: the next calls encode theirs again).
DEFAULT_MAX_TOOL_SETS: Final = 1024


def dumps(value: object) -> bytes:
    return _encode(value).encode()


class BodyEncoder:
    """Encodes request bodies, keeping the encoding of every tools list it saw (one per process: the model
    client's)."""

    def __init__(self, max_tool_sets: int = DEFAULT_MAX_TOOL_SETS) -> None:
        self._tools: dict[int, tuple[object, bytes]] = {}
        self._max_tool_sets = max_tool_sets

    @property
    def kept_tool_sets(self) -> int:
        return len(self._tools)

    def body(self, request: ModelRequest) -> bytes:
        """`request` as the body of a streaming call."""
        parts = [b'{"max_tokens":', str(request.max_tokens).encode(), b',"messages":[']
        messages = request.messages
        prefix = request.encoded_prefix
        if prefix is not None and prefix.count:
            parts.append(prefix.json)
            messages = messages[prefix.count :]
            if messages:
                parts.append(b",")
        parts.append(b",".join([dumps(m) for m in messages]))
        parts += [b'],"model":', dumps(request.model), b',"stream":true']
        if request.system:
            parts += [b',"system":', dumps(request.system)]
        if request.thinking is not None:
            parts += [b',"thinking":', dumps(request.thinking)]
        if request.tools:
            parts += [b',"tools":', self._tools_json(request.tools)]
        parts.append(b"}")
        return b"".join(parts)

    def _tools_json(self, tools: object) -> bytes:
        kept = self._tools.get(id(tools))
        if kept is not None and kept[0] is tools:
            return kept[1]
        encoded = dumps(tools)
        if len(self._tools) >= self._max_tool_sets:
            self._tools.clear()
        self._tools[id(tools)] = (tools, encoded)
        return encoded
