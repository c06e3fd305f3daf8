"""The model port: what the agent loop needs from a provider, independent of its SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from general_agent_server.domain.session import Usage

HTTP_CLIENTS: Final = ("aiohttp", "httpx")
"""The HTTP clients the Anthropic adapter can stream with (model/anthropic.py), its default first: the SDK's
aiohttp transport, or httpx, the SDK's own default."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Credential:
    """Where and as whom to call the provider. The key never leaves process memory."""

    api_key: str = field(repr=False)
    base_url: str | None = None
    profile_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class EncodedPrefix:
    """The first `count` messages of a request as the JSON the Messages API body carries them in (the messages
    encoded compactly, in order, joined by commas), kept from earlier calls of the session
    (model/history_encoding.py)."""

    count: int
    json: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One Messages API call, already in the provider's wire shape. `messages` is always the whole list;
    `encoded_prefix`, when set, is the JSON of its first messages, which an adapter may send instead of
    encoding them again."""

    model: str
    max_tokens: int
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    thinking: dict[str, Any] | None = None
    # `anthropic-beta` values the request needs (interleaved thinking for some families).
    betas: tuple[str, ...] = ()
    encoded_prefix: EncodedPrefix | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    text: str
    # The first delta of its content block (sent at once, never merged into an earlier event).
    first: bool = False
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThinkingDelta:
    text: str
    first: bool = False
    kind: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ThinkingBlockEnd:
    kind: Literal["thinking_end"] = "thinking_end"


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageComplete:
    """The whole assistant message: content blocks as sent back to the API later, the provider's stop
    reason (None if the stream ended without one), and the call's usage."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage
    request_id: str = ""
    kind: Literal["message_complete"] = "message_complete"


ModelStreamEvent = TextDelta | ThinkingDelta | ThinkingBlockEnd | MessageComplete


class ModelCallError(Exception):
    """The provider call failed after the SDK's retries. The message is already scrubbed of secrets.

    `retryable` marks a failure after the response started (a dropped connection, a stream that ended
    before `message_stop`, a malformed stream, an `overloaded_error` event): the SDK does not retry those,
    so the run loop does, under the same retry budget."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int | None = None,
        provider_request_id: str = "",
        timeout: bool = False,
        partial_usage: Usage | None = None,
        error_type: str = "",
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.provider_request_id = provider_request_id
        self.timeout = timeout
        self.partial_usage = partial_usage or Usage()
        self.error_type = error_type
        self.retryable = retryable


class ModelClient(Protocol):
    """Streams one model call. Cancelling the iterating task aborts the HTTP stream."""

    def stream(self, request: ModelRequest, credential: Credential) -> AsyncIterator[ModelStreamEvent]: ...

    async def close(self) -> None: ...
