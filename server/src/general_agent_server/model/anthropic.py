"""ModelClient on the official `anthropic` SDK (AsyncAnthropic, streaming raw events).

The body is pre-encoded (model/wire_body.py) and posted with the SDK's public request method; the raw events arrive
as decoded JSON objects (the SDK's `AsyncStream` with `object` as its item type: the SDK still decodes the SSE, raises
its `error` events and closes the response) and are accumulated by hand with list joins: the SDK's
`messages.stream()` helper re-folds a snapshot on every delta, and a pydantic model per raw event costs as much as
the rest of the event's handling. Tool input JSON is parsed once, at its block's stop."""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import anthropic
import anyio
import httpcore2
import httpx2
from anthropic.types import Message

from general_agent_server.domain.session import Usage
from general_agent_server.model.port import (
    HTTP_CLIENTS,
    Credential,
    MessageComplete,
    ModelCallError,
    ModelRequest,
    ModelStreamEvent,
    TextDelta,
    ThinkingBlockEnd,
    ThinkingDelta,
)
from general_agent_server.model.request_log import log_model_request
from general_agent_server.model.wire_body import BodyEncoder
from general_agent_server.security.redaction import scrub
from general_agent_server.sessions import session_log

# httpcore2 and aiohttp are imported above, not left to the SDK's HTTP transports, which import them when their first
# client is built: ~120 ms that would stall the event loop at the first model call after a start, with every other
# session waiting.
_EAGER = (httpcore2, aiohttp)

# aiohttp warns about every request body over 1 MiB sent as bytes ("might lock the event loop", a ResourceWarning).
# Here it does not: the body is already in memory and is written to the socket's buffer as is, as httpx does; and a
# stream instead of bytes would be sent chunked and could not be sent again by the SDK's retries. The warning is
# ignored so that a server run with warnings as errors does not fail every call of a long history.
LARGE_BODY_WARNING: Final = "Sending a large body directly with raw bytes"
warnings.filterwarnings("ignore", message=LARGE_BODY_WARNING, category=ResourceWarning, module="aiohttp.payload")


class _Block:
    """One content block being streamed."""

    __slots__ = ("parts", "signature", "start")

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.parts: list[str] = []
        self.signature = ""

    def finish(self) -> dict[str, Any]:
        block_type = self.start.get("type")
        if block_type == "text":
            return {"type": "text", "text": "".join(self.parts)}
        if block_type == "thinking":
            return {"type": "thinking", "thinking": "".join(self.parts), "signature": self.signature}
        if block_type == "tool_use":
            raw = "".join(self.parts)
            try:
                tool_input = json.loads(raw) if raw else (self.start.get("input") or {})
            except json.JSONDecodeError:
                tool_input = {"__invalid_json__": raw}
            return {
                "type": "tool_use",
                "id": self.start["id"],
                "name": self.start["name"],
                "input": tool_input,
            }
        return dict(self.start)


class _Message:
    """The message being streamed, folded from the raw events as JSON objects (the SDK's stream with `object` as its
    event type hands them over as decoded, without building a pydantic model per event)."""

    __slots__ = ("blocks", "stop_reason", "stopped", "usage")

    def __init__(self, usage: dict[str, int]) -> None:
        self.blocks: dict[int, _Block] = {}
        self.usage = usage
        self.stop_reason: str | None = None
        self.stopped = False

    def feed(self, event: dict[str, Any]) -> ModelStreamEvent | None:
        etype = event["type"]
        if etype == "content_block_delta":
            delta = event["delta"]
            block = self.blocks[event["index"]]
            dtype = delta["type"]
            if dtype == "text_delta":
                text = delta["text"]
                first = not block.parts
                block.parts.append(text)
                return TextDelta(text=text, first=first)
            if dtype == "thinking_delta":
                text = delta["thinking"]
                first = not block.parts
                block.parts.append(text)
                return ThinkingDelta(text=text, first=first)
            if dtype == "input_json_delta":
                block.parts.append(delta["partial_json"])
            elif dtype == "signature_delta":
                block.signature += delta["signature"]
        elif etype == "content_block_start":
            self.blocks[event["index"]] = _Block(dict(event["content_block"]))
        elif etype == "content_block_stop":
            if self.blocks[event["index"]].start.get("type") in ("thinking", "redacted_thinking"):
                return ThinkingBlockEnd()
        elif etype == "message_start":
            _merge_usage(self.usage, event["message"].get("usage") or {})
        elif etype == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason") or self.stop_reason
            _merge_usage(self.usage, event.get("usage") or {})
        elif etype == "message_stop":
            self.stopped = True
        return None


@dataclass(frozen=True, slots=True)
class _Endpoint:
    client: anthropic.AsyncAnthropic
    # The Messages URL, absolute: the SDK joins a relative path to its base URL again on every request (~25 µs,
    # about a quarter of its request building).
    messages_url: str


class AnthropicModelClient:
    """One AsyncAnthropic client (and connection pool) per credential, reused across calls."""

    def __init__(self, *, timeout_seconds: float, max_retries: int = 2, http_client: str = HTTP_CLIENTS[0]) -> None:
        if http_client not in HTTP_CLIENTS:
            raise ValueError(f"http_client: expected {' or '.join(HTTP_CLIENTS)}, got {http_client!r}")
        # As an httpx2 Timeout, not a float: the SDK builds one from a float on every request.
        self._timeout = httpx2.Timeout(timeout_seconds)
        self._max_retries = max_retries
        self._aiohttp = http_client == "aiohttp"
        self._clients: dict[tuple[str, str], _Endpoint] = {}
        self._encoder = BodyEncoder()
        self._last: tuple[Credential, _Endpoint] | None = None

    async def warm(self, credentials: list[Credential]) -> None:
        """Before the server serves: builds the clients of `credentials` (each pool with its TLS context, ~20 ms) and
        loads anyio's asyncio backend, which the SDK's transport loads at its first request (~10 ms), so a
        session's first model call does not stall the event loop with them."""
        for credential in credentials:
            self._endpoint(credential)
        await anyio.lowlevel.checkpoint()

    def _client(self, credential: Credential) -> anthropic.AsyncAnthropic:
        return self._endpoint(credential).client

    def _endpoint(self, credential: Credential) -> _Endpoint:
        last = self._last
        if last is not None and last[0] == credential:
            # Consecutive calls mostly use one credential: no key hash per call.
            return last[1]
        # Keyed by a hash so the key itself is not kept twice in memory structures that might be dumped.
        key = (hashlib.sha256(credential.api_key.encode()).hexdigest(), credential.base_url or "")
        endpoint = self._clients.get(key)
        if endpoint is None:
            client = anthropic.AsyncAnthropic(
                api_key=credential.api_key,
                base_url=credential.base_url,
                http_client=self._http_client(),
                timeout=self._timeout,
                max_retries=self._max_retries,
                # A compressed SSE stream can hold every event until the end of generation.
                default_headers={"accept-encoding": "identity"},
            )
            endpoint = self._clients[key] = _Endpoint(client=client, messages_url=messages_url(client.base_url))
        self._last = (credential, endpoint)
        return endpoint

    def _http_client(self) -> httpx2.AsyncClient:
        """The SDK's aiohttp client: the same SDK request path, with aiohttp's HTTP/1.1 (its parser in C) in place of
        httpx's transport (httpcore, h11 and anyio in Python), about a third less CPU per streamed request
        (bench/README.md). Or the SDK's default httpx client. Either with the SDK's own defaults (limits,
        redirects, proxies from the environment)."""
        if self._aiohttp:
            return anthropic.DefaultAioHttpClient(timeout=self._timeout)
        return anthropic.DefaultAsyncHttpxClient(timeout=self._timeout)

    async def close(self) -> None:
        endpoints, self._clients, self._last = list(self._clients.values()), {}, None
        for endpoint in endpoints:
            await endpoint.client.close()

    async def stream(self, request: ModelRequest, credential: Credential) -> AsyncIterator[ModelStreamEvent]:
        """The call's events, and one `model_request` log line when it ends (model/request_log.py). One generator
        from the SDK's event stream to the run: every layer is a hop per event."""
        started = time.perf_counter()
        complete: MessageComplete | None = None
        error: ModelCallError | None = None
        usage: dict[str, int] = {}
        request_id = ""
        try:
            stream = await self._post(request, credential)
            message = _Message(usage)
            try:
                request_id = stream.response.headers.get("request-id", "") or ""
                async for event in stream:
                    item = message.feed(event)
                    if item is not None:
                        yield item
            except _STREAM_ERRORS as exc:
                raise _mid_stream_error(exc, credential, usage, request_id) from None
            finally:
                await stream.close()
            if not message.stopped:
                # The connection ended mid-message: what arrived is a fragment, never a message.
                raise _stream_failure("the model stream ended before message_stop", usage, request_id)
            content = [message.blocks[i].finish() for i in sorted(message.blocks)]
            complete = MessageComplete(
                content=content, stop_reason=message.stop_reason, usage=_usage(usage), request_id=request_id
            )
            yield complete
        except ModelCallError as exc:
            error = exc
            raise
        finally:
            if session_log.enabled():
                log_model_request(request, credential, time.perf_counter() - started, complete, error)

    async def _post(self, request: ModelRequest, credential: Credential) -> anthropic.AsyncStream[Any]:
        # The body `messages.create(stream=True)` would send, pre-encoded (model/wire_body.py), through the SDK's
        # public request method: same endpoint, headers, retries, errors and event stream.
        options: anthropic.RequestOptions = {}
        if request.betas:
            options["headers"] = {"anthropic-beta": ",".join(request.betas)}
        endpoint = self._endpoint(credential)
        try:
            stream: anthropic.AsyncStream[Any] = await endpoint.client.post(
                endpoint.messages_url,
                cast_to=Message,
                content=self._encoder.body(request),
                options=options,
                stream=True,
                stream_cls=anthropic.AsyncStream[object],
            )
        except anthropic.APIError as exc:
            raise _call_error(exc, credential) from None
        return stream


def messages_url(base_url: httpx2.URL) -> str:
    """The Messages endpoint under `base_url`, joined as the SDK joins a relative path to it (its base URL always
    ends with a slash)."""
    return str(base_url.copy_with(raw_path=base_url.raw_path + b"v1/messages"))


# Undecodable or misshapen event data, or a delta for a block that never started, counts as a malformed stream.
# The aiohttp transport maps aiohttp's errors to httpx's; one it does not map arrives as aiohttp's own.
_STREAM_ERRORS = (
    anthropic.APIError,
    httpx2.TimeoutException,
    httpx2.TransportError,
    aiohttp.ClientError,
    ValueError,
    KeyError,
    TypeError,
)


def _mid_stream_error(exc: Exception, credential: Credential, usage: dict[str, int], request_id: str) -> ModelCallError:
    """What an error while the events arrive means for the call (one of _STREAM_ERRORS)."""
    if isinstance(exc, anthropic.APIError):
        return _call_error(exc, credential, usage=usage, request_id=request_id, mid_stream=True)
    if isinstance(exc, httpx2.TimeoutException):
        return _stream_failure("the model stream timed out", usage, request_id, timeout=True)
    if isinstance(exc, (httpx2.TransportError, aiohttp.ClientError)):
        return _stream_failure(f"the model stream broke: {type(exc).__name__}", usage, request_id)
    return _stream_failure("the model stream was malformed", usage, request_id)


def _merge_usage(into: dict[str, int], update: dict[str, Any]) -> None:
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = update.get(key)
        if isinstance(value, int) and value:
            into[key] = value


def _usage(raw: dict[str, int]) -> Usage:
    return Usage(
        input_tokens=raw.get("input_tokens", 0),
        output_tokens=raw.get("output_tokens", 0),
        cache_read_input_tokens=raw.get("cache_read_input_tokens", 0),
        cache_creation_input_tokens=raw.get("cache_creation_input_tokens", 0),
        model_calls=1,
    )


# The HTTP status an error type stands for, for errors that arrive as an SSE `error` event after the
# response already answered 200 (an `overloaded_error` mid-generation is the common one).
_ERROR_TYPE_STATUS = {
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


def _retryable(status: int | None) -> bool:
    """The statuses the SDK itself retries before a response starts: 408, 409, 429 and 5xx."""
    return status is None or status in (408, 409, 429) or status >= 500


def _call_error(
    exc: anthropic.APIError,
    credential: Credential,
    *,
    usage: dict[str, int] | None = None,
    request_id: str = "",
    mid_stream: bool = False,
) -> ModelCallError:
    status: int | None = None
    error_type = ""
    message = str(exc.message) if getattr(exc, "message", None) else str(exc)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        request_id = exc.request_id or request_id
        message = exc.api_message or message
        error_type = _error_type(exc.body)
        if status == 200:
            # An SSE error event: the response said 200 before the failure; the error type says what it was.
            status = _ERROR_TYPE_STATUS.get(error_type, 500)
    return ModelCallError(
        scrub(message, (credential.api_key,)),
        http_status=status,
        provider_request_id=request_id,
        timeout=isinstance(exc, anthropic.APITimeoutError),
        partial_usage=_usage(usage or {}),
        error_type=error_type,
        # Before the response started, the SDK has already retried what it retries.
        retryable=mid_stream and _retryable(status),
    )


def _error_type(body: object) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            return str(error["type"])
    return ""


def _stream_failure(message: str, usage: dict[str, int], request_id: str, *, timeout: bool = False) -> ModelCallError:
    """A network failure after the response started: the provider is unavailable, the call may be retried."""
    return ModelCallError(
        message, provider_request_id=request_id, timeout=timeout, partial_usage=_usage(usage), retryable=True
    )
