"""The channel and call plumbing under :class:`~general_agent.AgentClient`: TLS and bearer-token options,
default deadlines, the retry policy for idempotent calls and the translation of ``grpc.aio.AioRpcError``
into :class:`~general_agent.errors.AgentError`.

Retries are gRPC's own (the channel's service config, ``grpc.service_config``), never a loop here: the
read-only RPCs, and the mutating ones whose request carries an idempotency key (the client fills
``request_id`` when the caller gives none, so a retried request is the same request), are retried on
UNAVAILABLE up to four attempts with exponential backoff. Streams and commands without an idempotency key
(StreamTurn, RunSession, SubmitHostedToolResult, RequestStop, CancelRun ...) are not retried.
"""

# `timeout=` is a gRPC deadline sent to the server (grpc's own keyword), not a local asyncio.timeout.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import enum
import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, TypeVar

import grpc

from general_agent.errors import AgentError
from general_agent.v1 import agent_service_pb2_grpc

if TYPE_CHECKING:
    from general_agent.v1.agent_service_pb2_grpc import AgentServiceAsyncStub

_LOG = logging.getLogger(__name__)

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds allowed for a unary call unless the client or the call says otherwise."""

SERVICE: Final = "general_agent.v1.AgentService"
MAX_MESSAGE_BYTES: Final = 32 * 1024 * 1024  # the server's default max_receive_message_length

RETRIED_METHODS: Final = (
    # read-only
    "GetSession",
    "ListSessions",
    "GetSessionHistory",
    "GetUsage",
    "ListCheckpoints",
    "GetMcpServers",
    "GetMcpStatus",
    "ListHookRegistrations",
    "GetServerInfo",
    # idempotent by their request_id (filled by the client) or by their meaning
    "CreateSession",
    "DeleteSession",
    "ResumeSession",
    "ContinueSession",
    "ForkSession",
    "ResetSession",
    "RestoreCheckpoint",
    "RequestCompaction",
    "MaybeCompactByTokens",
    "InjectMessage",
    "ClearStop",
    "SetMcpServers",
    "ToggleMcpServer",
    "RegisterHooks",
    "UnregisterHooks",
)
"""The AgentService methods the channel's retry policy covers."""

RETRY_POLICY: Final[dict[str, Any]] = {
    "maxAttempts": 4,
    "initialBackoff": "0.1s",
    "maxBackoff": "2s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


def service_config() -> str:
    """The ``grpc.service_config`` channel option: the retry policy of :data:`RETRIED_METHODS`."""
    config = {
        "methodConfig": [
            {
                "name": [{"service": SERVICE, "method": method} for method in RETRIED_METHODS],
                "retryPolicy": RETRY_POLICY,
            }
        ]
    }
    return json.dumps(config)


ReqT = TypeVar("ReqT")
RespT = TypeVar("RespT")
_Item = TypeVar("_Item")
MetadataLike: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]]
ChannelOption: TypeAlias = tuple[str, str | int]


class _Default(enum.Enum):
    TOKEN = enum.auto()


DEFAULT: Final = _Default.TOKEN
Timeout: TypeAlias = float | Literal[_Default.TOKEN] | None
"""``float`` seconds, ``None`` for no deadline; omitted = the client's default."""


def channel_options(options: Sequence[ChannelOption], *, retries: bool) -> list[ChannelOption]:
    built: list[ChannelOption] = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        # A dropped connection is redialled quickly (run() reattaches over it).
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 5000),
    ]
    if retries:
        built += [("grpc.enable_retries", 1), ("grpc.service_config", service_config())]
    else:
        built.append(("grpc.enable_retries", 0))
    return [*built, *options]


def open_channel(
    address: str,
    *,
    tls: bool,
    root_certificates: bytes | None,
    credentials: grpc.ChannelCredentials | None,
    options: list[ChannelOption],
) -> grpc.aio.Channel:
    """An insecure channel, or a TLS one (system roots, ``root_certificates`` or the given credentials)."""
    if credentials is not None or tls or root_certificates is not None:
        creds = credentials or grpc.ssl_channel_credentials(root_certificates=root_certificates)
        return grpc.aio.secure_channel(address, creds, options=options)
    return grpc.aio.insecure_channel(address, options=options)


def base_metadata(metadata: MetadataLike | None, token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata sent with every call: the caller's, lower-cased, and ``authorization: Bearer <token>``."""
    items = metadata.items() if isinstance(metadata, Mapping) else (metadata or ())
    pairs = [(k.lower(), v) for k, v in items]
    if token:
        pairs = [(k, v) for k, v in pairs if k != "authorization"]
        pairs.append(("authorization", f"Bearer {token}"))
    return tuple(pairs)


async def follow_pages(
    fetch: Callable[[str], Awaitable[tuple[list[_Item], str]]],
) -> AsyncGenerator[_Item, None]:
    """Every item of a paged List RPC: ``fetch(page_token)`` returns one page and the next token (``""`` on
    the last page)."""
    token = ""
    while True:
        items, token = await fetch(token)
        for item in items:
            yield item
        if not token:
            return


def transient(error: AgentError) -> bool:
    """A dropped connection or a stopping server (follow the run up again), not an answer of the service
    (raise): UNAVAILABLE, or INTERNAL / UNKNOWN without an ErrorInfo reason (a connection reset mid-stream)."""
    if error.code == grpc.StatusCode.UNAVAILABLE:
        return True
    return error.code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and not error.reason


async def await_reconnect(channel: grpc.aio.Channel, error: AgentError, remaining: float, what: str) -> None:
    """Waits until ``channel`` is ready again after the transient ``error`` dropped the stream of ``what``;
    raises ``error`` when it is not within ``remaining`` seconds."""
    _LOG.info("%s: stream dropped (%s); reattaching", what, error.code_name)
    try:
        async with asyncio.timeout(max(remaining, 0.0)):
            await channel.channel_ready()
    except TimeoutError:
        raise error from None


def new_id() -> str:
    """A fresh id for ``x-request-id``, ``request_id`` and RunSession ``command_id`` values."""
    return uuid.uuid4().hex


class Transport:
    """The channel, the stub and the call wrappers every part of the client uses."""

    _address: str
    _channel: grpc.aio.Channel
    _owns_channel: bool
    _stub: AgentServiceAsyncStub
    _metadata: tuple[tuple[str, str], ...]
    _timeout: float | None
    _closed: bool

    def _init(
        self,
        address: str,
        channel: grpc.aio.Channel,
        *,
        owns_channel: bool,
        metadata: tuple[tuple[str, str], ...],
        timeout: float | None,
    ) -> None:
        self._address = address
        self._channel = channel
        self._owns_channel = owns_channel
        self._stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        self._metadata = metadata
        self._timeout = timeout
        self._closed = False

    @property
    def address(self) -> str:
        return self._address

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    @property
    def stub(self) -> AgentServiceAsyncStub:
        """The generated stub on this client's channel."""
        return self._stub

    def _call_metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return (*self._metadata, ("x-request-id", request_id))

    def _deadline(self, timeout: Timeout) -> float | None:
        return self._timeout if timeout is DEFAULT else timeout

    async def _unary(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[ReqT, RespT],
        request: ReqT,
        timeout: Timeout,
    ) -> RespT:
        request_id = new_id()
        try:
            response: RespT = await method(
                request, timeout=self._deadline(timeout), metadata=self._call_metadata(request_id)
            )
        except grpc.aio.AioRpcError as err:
            raise AgentError.from_rpc_error(err, request_id=request_id) from err
        return response

    async def _server_stream(
        self,
        method: grpc.aio.UnaryStreamMultiCallable[ReqT, RespT],
        request: ReqT,
        timeout: float | None,
    ) -> AsyncGenerator[RespT, None]:
        request_id = new_id()
        call = method(request, timeout=timeout, metadata=self._call_metadata(request_id))
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as err:
            raise AgentError.from_rpc_error(err, request_id=request_id) from err
        finally:
            call.cancel()  # a no-op once the call has ended; stops the RPC if the consumer left early

    def _bidi(
        self,
        method: grpc.aio.StreamStreamMultiCallable[ReqT, RespT],
        requests: AsyncIterator[ReqT],
        *,
        timeout: float | None = None,
        wait_for_ready: bool = False,
    ) -> tuple[grpc.aio.StreamStreamCall[ReqT, RespT], str]:
        """Starts a bidirectional call fed by ``requests``; returns the call and its ``x-request-id``."""
        request_id = new_id()
        call = method(
            requests, timeout=timeout, metadata=self._call_metadata(request_id), wait_for_ready=wait_for_ready
        )
        return call, request_id
