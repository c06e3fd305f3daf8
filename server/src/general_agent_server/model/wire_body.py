"""The Messages API request body as JSON bytes, with what repeats between calls encoded once.

The calls of a session resend the same history blocks and tool definitions; handed the body as objects, the SDK
copies the whole tree (`copy_tree`) and JSON-encodes it again on every call, a cost that grows with the history.
Here every content block and every tools list is encoded once and kept by identity, and each body is joined from
the kept pieces; the SDK sends the bytes as given (`client.post(content=...)`, model/anthropic.py).

Identity is a safe key because what is kept is never changed in place: history blocks are committed once and
replaced, never mutated (sessions/ledger.py), a tools list is built once per tool set (model/request_builder.py),
and the kept entry holds its object, so an id is never reused while its entry exists. A block carrying
`cache_control` is the per-call copy of the request's cache breakpoint and is encoded without being kept.

The encoding is the SDK's own (compact separators, non-ASCII as is, NaN refused) with the keys in the order the
SDK's `messages.create` writes them, so the bytes equal what `messages.create(stream=True)` would send."""

from __future__ import annotations

import json
from typing import Any, Final

from general_agent_server.model.port import ModelRequest

_encode: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

# What the kept pieces may hold before they are dropped (all at once: the next calls encode their pieces again).
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024


_ROLE_PREFIX: Final = {role: b'{"role":"' + role.encode() + b'","content":[' for role in ("user", "assistant")}


def dumps(value: object) -> bytes:
    return _encode(value).encode()


class BodyEncoder:
    """Encodes request bodies, keeping the encoding of every content block and tools list it saw (one per process:
    the model client's)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._kept: dict[int, tuple[object, bytes]] = {}
        self._kept_bytes = 0
        self._max_bytes = max_bytes

    @property
    def kept_bytes(self) -> int:
        return self._kept_bytes

    def body(self, request: ModelRequest) -> bytes:
        """`request` as the body of a streaming call."""
        parts = [b'{"max_tokens":', str(request.max_tokens).encode(), b',"messages":[']
        parts.append(b",".join([self._message(m) for m in request.messages]))
        parts += [b'],"model":', dumps(request.model), b',"stream":true']
        if request.system:
            parts += [b',"system":', dumps(request.system)]
        if request.thinking is not None:
            parts += [b',"thinking":', dumps(request.thinking)]
        if request.tools:
            parts += [b',"tools":', self._piece(request.tools)]
        parts.append(b"}")
        return b"".join(parts)

    def _message(self, message: dict[str, Any]) -> bytes:
        content = message.get("content")
        prefix = _ROLE_PREFIX.get(message.get("role"))  # type: ignore[arg-type]
        if prefix is None or len(message) != 2 or type(content) is not list:
            return dumps(message)
        piece = self._piece
        blocks = [dumps(b) if type(b) is dict and "cache_control" in b else piece(b) for b in content]
        return prefix + b",".join(blocks) + b"]}"

    def _piece(self, value: object) -> bytes:
        kept = self._kept.get(id(value))
        if kept is not None and kept[0] is value:
            return kept[1]
        encoded = dumps(value)
        if self._kept_bytes + len(encoded) > self._max_bytes:
            self._kept.clear()
            self._kept_bytes = 0
        self._kept[id(value)] = (value, encoded)
        self._kept_bytes += len(encoded)
        return encoded
