"""What the fake keeps of every request it receives (:class:`RecordedRequest`), and the responder type that
chooses a reply from one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .replies import ReplyLike
from .signals import ThreadSafeEvent

JSONDict: TypeAlias = dict[str, Any]


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


Responder: TypeAlias = Callable[[RecordedRequest], ReplyLike | Awaitable[ReplyLike]]
