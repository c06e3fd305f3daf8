"""An ergonomic asyncio client for ``general_agent.v1.AgentService``.

Example::

    async with await AgentClient.connect("127.0.0.1:50051") as client:
        session = await client.create_session(system_prompt="Be brief.")
        async for event in client.stream_turn(session.identity.session_id, "Hello"):
            if event_kind(event) == "assistant_delta":
                print(event.assistant_delta.text, end="")

Every method is a coroutine (or an async iterator for streams), returns the generated proto messages,
and raises :class:`~general_agent.errors.AgentError` (or a subclass chosen by the ErrorInfo reason)
instead of ``grpc.aio.AioRpcError``. Each call sends a fresh ``x-request-id`` (uuid4 hex) so it can be
found in the server log; the error carries it as ``AgentError.request_id``. Unary calls get a 30 s
deadline by default (``timeout=`` per call, ``None`` for no deadline); streams have none unless given.

Streams skip nothing: an event of a variant newer than this client has no kind (see
:mod:`general_agent.events` for the forward-compatibility rule and ``iter_known``).
"""

# `timeout=` is a gRPC deadline sent to the server (grpc's own keyword), not a local asyncio.timeout.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import enum
import mimetypes
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypeVar

import grpc

from general_agent.errors import AgentError
from general_agent.events import is_run_finished, outcome_name, text_of
from general_agent.v1 import (
    agent_service_pb2_grpc,
    content_pb2,
    event_pb2,
    server_info_pb2,
    session_messages_pb2,
    session_pb2,
    transcript_pb2,
    turn_pb2,
)

if TYPE_CHECKING:
    from general_agent.v1.agent_service_pb2_grpc import AgentServiceAsyncStub

__all__ = [
    "DEFAULT_TIMEOUT",
    "AgentClient",
    "BusyPolicyName",
    "Image",
    "InputLike",
    "ModeName",
    "OnDisconnectName",
    "TurnResult",
]

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds allowed for a unary call unless the client or the call says otherwise."""

_MAX_MESSAGE_BYTES: Final = 32 * 1024 * 1024  # the server's default max_receive_message_length

ReqT = TypeVar("ReqT")
RespT = TypeVar("RespT")

ModeName: TypeAlias = Literal["GENERAL", "CODING"]
OnDisconnectName: TypeAlias = Literal["CANCEL", "CONTINUE"]
BusyPolicyName: TypeAlias = Literal["REJECT", "ENQUEUE", "INTERRUPT", "STEER"]
MetadataLike: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]]


class _Default(enum.Enum):
    TOKEN = enum.auto()


_DEFAULT: Final = _Default.TOKEN
Timeout: TypeAlias = float | Literal[_Default.TOKEN] | None
"""``float`` seconds, ``None`` for no deadline; omitted = the client's default."""


@dataclass(frozen=True, slots=True)
class Image:
    """An inline image for turn input: raw bytes (not base64) of a png, jpeg, gif or webp."""

    mime_type: str
    data: bytes

    @classmethod
    def from_path(cls, path: str | Path, mime_type: str | None = None) -> Image:
        """Reads an image file; the MIME type is guessed from the suffix unless given."""
        path = Path(path)
        guessed = mime_type or mimetypes.guess_type(path.name)[0]
        if not guessed or not guessed.startswith("image/"):
            raise ValueError(f"cannot tell the image type of {path.name!r}; pass mime_type=")
        return cls(mime_type=guessed, data=path.read_bytes())

    def to_proto(self) -> content_pb2.ContentPart:
        return content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type=self.mime_type, data=self.data))


InputPart: TypeAlias = str | Image | content_pb2.ContentPart
InputLike: TypeAlias = InputPart | Sequence[InputPart]
"""Turn input: a string, an :class:`Image`, a ``ContentPart``, or a list mixing them."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """The outcome of :meth:`AgentClient.run_text`.

    Attributes:
        text: the concatenated ``assistant_delta`` text of the run.
        outcome: ``"COMPLETED"``, ``"SUSPENDED"``, ``"STOPPED"``, ``"FAILED"``, or ``""`` when the
            stream ended without a ``run_finished``.
        events: every event received, in order.
        reason: the run reason for STOPPED / FAILED (e.g. ``"PROVIDER_ERROR"``), else ``""``.
        error: the run's failure (``run_finished.error``) as an :class:`AgentError`, else ``None``.
    """

    text: str
    outcome: str
    events: list[event_pb2.SessionEvent]
    reason: str = ""
    error: AgentError | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.outcome == "COMPLETED"

    @property
    def run_id(self) -> str:
        """The id of the run (from its events), or ``""``."""
        return next((e.run_id for e in self.events if e.run_id), "")


class AgentClient:
    """Async client for AgentService.

    Build it with ``await AgentClient.connect(address)`` (waits until the channel is ready) or
    ``AgentClient(address)`` inside a running event loop, and close it with ``await client.close()`` or
    ``async with``. ``metadata`` (e.g. ``{"authorization": "Bearer ..."}``) is sent with every call.
    """

    def __init__(
        self,
        address: str,
        *,
        metadata: MetadataLike | None = None,
        secure: bool = False,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        options: Sequence[tuple[str, str | int]] = (),
    ) -> None:
        channel_options: list[tuple[str, str | int]] = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            *options,
        ]
        if secure or credentials is not None:
            channel = grpc.aio.secure_channel(
                address, credentials or grpc.ssl_channel_credentials(), options=channel_options
            )
        else:
            channel = grpc.aio.insecure_channel(address, options=channel_options)
        self._init(address, channel, owns_channel=True, metadata=metadata, timeout=timeout)

    def _init(
        self,
        address: str,
        channel: grpc.aio.Channel,
        *,
        owns_channel: bool,
        metadata: MetadataLike | None,
        timeout: float | None,
    ) -> None:
        self._address = address
        self._channel = channel
        self._owns_channel = owns_channel
        self._stub: AgentServiceAsyncStub = agent_service_pb2_grpc.AgentServiceStub(channel)
        items = metadata.items() if isinstance(metadata, Mapping) else (metadata or ())
        self._metadata: tuple[tuple[str, str], ...] = tuple((k.lower(), v) for k, v in items)
        self._timeout = timeout
        self._closed = False

    # ------------------------------------------------------------------ life cycle
    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        metadata: MetadataLike | None = None,
        secure: bool = False,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float | None = 10.0,
        options: Sequence[tuple[str, str | int]] = (),
    ) -> AgentClient:
        """Opens a channel and waits until it is ready (``connect_timeout`` seconds, ``None`` = no wait).

        Raises AgentError(UNAVAILABLE) when the server cannot be reached in time.
        """
        client = cls(
            address, metadata=metadata, secure=secure, credentials=credentials, timeout=timeout, options=options
        )
        if connect_timeout is not None and not await client._wait_ready(connect_timeout):
            raise AgentError(
                grpc.StatusCode.UNAVAILABLE, f"could not connect to {address} within {connect_timeout:g} s"
            )
        return client

    async def _wait_ready(self, delay: float) -> bool:
        """True once the channel is READY; else closes the client and returns False.

        The readiness watch is not cancelled: closing the channel resolves it (state SHUTDOWN), and it is
        awaited here, so no gRPC completion is left to arrive after this event loop has gone.
        """
        ready = asyncio.ensure_future(self._channel.channel_ready())
        try:
            done, _ = await asyncio.wait({ready}, timeout=delay)
        except BaseException:
            ready.cancel()
            await self.close()
            raise
        if ready in done and ready.exception() is None:
            return True
        await self.close()
        await asyncio.gather(ready, return_exceptions=True)
        return False

    @classmethod
    def from_channel(
        cls,
        channel: grpc.aio.Channel,
        *,
        metadata: MetadataLike | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> AgentClient:
        """Wraps an existing channel; :meth:`close` leaves it open (its owner closes it)."""
        client = cls.__new__(cls)
        client._init("", channel, owns_channel=False, metadata=metadata, timeout=timeout)
        return client

    async def close(self) -> None:
        """Closes the channel (if this client opened it); in-flight calls are cancelled. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def address(self) -> str:
        return self._address

    @property
    def stub(self) -> AgentServiceAsyncStub:
        """The generated stub on this client's channel, for RPCs this class does not wrap."""
        return self._stub

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self,
        *,
        session_id: str = "",
        session_key: str = "",
        mode: ModeName | int = "GENERAL",
        system_prompt: str = "",
        model_ref: str = "",
        labels: Mapping[str, str] | None = None,
        api_key: str = "",
        request_id: str = "",
        session: session_pb2.Session | None = None,
        timeout: Timeout = _DEFAULT,
    ) -> session_pb2.Session:
        """Creates a session (empty ``session_id`` ⇒ a server UUID) and returns it.

        ``session`` is an optional template for settings without a keyword here (thinking, hosted
        tools, limits, memory ...); the keywords given override it. ``api_key`` stays in server memory
        only. ``request_id`` is the idempotency key. Raises SessionAlreadyExists, or AgentError
        INVALID_ARGUMENT with ``field_violations``.
        """
        proto = session_pb2.Session()
        if session is not None:
            proto.CopyFrom(session)
        if session_id:
            proto.identity.session_id = session_id
        if session_key:
            proto.identity.session_key = session_key
        if session is None or mode != "GENERAL":
            proto.identity.mode = _mode(mode)
        if system_prompt:
            proto.system_prompt = system_prompt
        if model_ref:
            proto.model_ref = model_ref
        if labels:
            proto.labels.update(labels)
        request = session_messages_pb2.CreateSessionRequest(session=proto, request_id=request_id, api_key=api_key)
        response: session_messages_pb2.CreateSessionResponse = await self._unary(
            self._stub.CreateSession, request, timeout
        )
        return response.session

    async def get_session(self, session_id: str, *, timeout: Timeout = _DEFAULT) -> session_pb2.Session:
        """Returns the session. Raises SessionNotFound."""
        request = session_messages_pb2.GetSessionRequest(session_id=session_id)
        response: session_messages_pb2.GetSessionResponse = await self._unary(self._stub.GetSession, request, timeout)
        return response.session

    async def list_sessions_page(
        self,
        *,
        page_size: int = 0,
        page_token: str = "",
        session_key_prefix: str = "",
        mode: ModeName | int | None = None,
        labels: Mapping[str, str] | None = None,
        parent_session_id: str = "",
        include_children: bool = False,
        timeout: Timeout = _DEFAULT,
    ) -> tuple[list[session_pb2.Session], str]:
        """One page of sessions (newest first) and the next page token (``""`` on the last page)."""
        request = session_messages_pb2.ListSessionsRequest(
            page_size=page_size,
            page_token=page_token,
            session_key_prefix=session_key_prefix,
            mode=session_pb2.SESSION_MODE_UNSPECIFIED if mode is None else _mode(mode),
            labels=dict(labels or {}),
            parent_session_id=parent_session_id,
            include_children=include_children,
        )
        response: session_messages_pb2.ListSessionsResponse = await self._unary(
            self._stub.ListSessions, request, timeout
        )
        return list(response.sessions), response.next_page_token

    async def list_sessions(
        self,
        *,
        page_size: int = 0,
        session_key_prefix: str = "",
        mode: ModeName | int | None = None,
        labels: Mapping[str, str] | None = None,
        parent_session_id: str = "",
        include_children: bool = False,
        timeout: Timeout = _DEFAULT,
    ) -> AsyncGenerator[session_pb2.Session, None]:
        """Every session matching the filters, newest first, following page tokens (``timeout`` applies
        to each page). ``page_size`` 0 = the server default."""
        token = ""
        while True:
            sessions, token = await self.list_sessions_page(
                page_size=page_size,
                page_token=token,
                session_key_prefix=session_key_prefix,
                mode=mode,
                labels=labels,
                parent_session_id=parent_session_id,
                include_children=include_children,
                timeout=timeout,
            )
            for session in sessions:
                yield session
            if not token:
                return

    async def delete_session(self, session_id: str, *, request_id: str = "", timeout: Timeout = _DEFAULT) -> bool:
        """Deletes the session and all it owns; False when it did not exist."""
        request = session_messages_pb2.DeleteSessionRequest(session_id=session_id, request_id=request_id)
        response: session_messages_pb2.DeleteSessionResponse = await self._unary(
            self._stub.DeleteSession, request, timeout
        )
        return response.deleted

    async def resume_session(
        self,
        session_id: str,
        *,
        system_prompt: str | None = None,
        model_ref: str | None = None,
        api_key: str = "",
        max_tokens: int | None = None,
        auth_profile_id: str | None = None,
        request_id: str = "",
        timeout: Timeout = _DEFAULT,
    ) -> session_pb2.Session:
        """Persists the given overrides (``None`` = keep) and returns the session; starts no run.
        ``api_key`` is held in server memory only. Raises SessionNotFound."""
        overrides = session_pb2.SessionOverrides(
            system_prompt=system_prompt,
            model_ref=model_ref,
            api_key=api_key,
            max_tokens=max_tokens,
            auth_profile_id=auth_profile_id,
        )
        request = session_messages_pb2.ResumeSessionRequest(
            session_id=session_id, overrides=overrides, request_id=request_id
        )
        response: session_messages_pb2.ResumeSessionResponse = await self._unary(
            self._stub.ResumeSession, request, timeout
        )
        return response.session

    async def reset_session(
        self, session_id: str, reason: str = "manual", *, request_id: str = "", timeout: Timeout = _DEFAULT
    ) -> session_pb2.Session:
        """Stops any run and clears the model history; identity, config and numbering stay."""
        request = session_messages_pb2.ResetSessionRequest(session_id=session_id, reason=reason, request_id=request_id)
        response: session_messages_pb2.ResetSessionResponse = await self._unary(
            self._stub.ResetSession, request, timeout
        )
        return response.session

    async def history_page(
        self, session_id: str, *, page_size: int = 0, page_token: str = "", timeout: Timeout = _DEFAULT
    ) -> tuple[list[transcript_pb2.TranscriptEntry], str]:
        """One page of transcript entries and the next page token (``""`` on the last page)."""
        request = session_messages_pb2.GetSessionHistoryRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        response: session_messages_pb2.GetSessionHistoryResponse = await self._unary(
            self._stub.GetSessionHistory, request, timeout
        )
        return list(response.entries), response.next_page_token

    async def history(
        self, session_id: str, *, page_size: int = 0, timeout: Timeout = _DEFAULT
    ) -> AsyncGenerator[transcript_pb2.TranscriptEntry, None]:
        """Every transcript entry of the session in write order, following page tokens."""
        token = ""
        while True:
            entries, token = await self.history_page(session_id, page_size=page_size, page_token=token, timeout=timeout)
            for entry in entries:
                yield entry
            if not token:
                return

    # ------------------------------------------------------------------ turns and events
    async def stream_turn(
        self,
        session_id: str,
        text_or_parts: InputLike,
        *,
        images: Iterable[Image] = (),
        request_id: str = "",
        on_disconnect: OnDisconnectName = "CANCEL",
        busy_policy: BusyPolicyName = "REJECT",
        timeout: float | None = None,
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """Runs one turn and yields its events; ends after the first ``run_finished`` (terminal or
        SUSPENDED).

        ``text_or_parts`` is a string, an :class:`Image`, a ``ContentPart`` or a list mixing them;
        ``images`` are appended after it. Closing the generator early (``aclose()``, or ``break``
        inside ``contextlib.aclosing(...)``; a plain ``break`` closes it when it is garbage-collected)
        or cancelling the task cancels the call, which stops the run under ``on_disconnect="CANCEL"``.
        Errors before the run starts (SessionNotFound, SessionBusy, NoApiKey, INVALID_ARGUMENT)
        raise; run failures arrive as a ``run_finished`` event instead.
        """
        request = turn_pb2.StreamTurnRequest(
            session_id=session_id,
            input=_parts(text_or_parts, images),
            options=turn_pb2.TurnOptions(
                busy_policy=turn_pb2.BusyPolicy.Value(f"BUSY_POLICY_{busy_policy}"),
                on_disconnect=turn_pb2.OnDisconnect.Value(f"ON_DISCONNECT_{on_disconnect}"),
            ),
            request_id=request_id,
        )
        async for response in self._server_stream(self._stub.StreamTurn, request, timeout):
            yield response.event

    async def watch(
        self, session_id: str, after_sequence: int | None = None, *, timeout: float | None = None
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """Yields the session's events after ``after_sequence`` (replayed from the log; ``None`` = live
        only), then live events, until the caller stops iterating. Resume after a disconnect with
        the last ``sequence`` seen. Raises AgentError OUT_OF_RANGE ``EVENTS_EXPIRED`` for a cursor older
        than retention."""
        request = turn_pb2.WatchSessionRequest(session_id=session_id, after_sequence=after_sequence)
        async for response in self._server_stream(self._stub.WatchSession, request, timeout):
            yield response.event

    async def run_text(
        self,
        session_id: str,
        text: str,
        *,
        request_id: str = "",
        timeout: float | None = None,
    ) -> TurnResult:
        """Runs one text turn to its first ``run_finished`` and returns the text, outcome and events.
        A failed run is returned (``outcome="FAILED"``, ``error``), not raised."""
        events = [event async for event in self.stream_turn(session_id, text, request_id=request_id, timeout=timeout)]
        finished = next((e for e in reversed(events) if is_run_finished(e)), None)
        if finished is None:
            return TurnResult(text=text_of(events), outcome="", events=events)
        run_finished = finished.run_finished
        reason = ""
        if run_finished.reason != event_pb2.RUN_REASON_UNSPECIFIED:
            try:
                reason = event_pb2.RunReason.Name(run_finished.reason).removeprefix("RUN_REASON_")
            except ValueError:
                reason = str(int(run_finished.reason))
        error = AgentError.from_status(run_finished.error) if run_finished.HasField("error") else None
        return TurnResult(
            text=text_of(events), outcome=outcome_name(finished), events=events, reason=reason, error=error
        )

    # ------------------------------------------------------------------ server
    async def server_info(self, *, timeout: Timeout = _DEFAULT) -> server_info_pb2.GetServerInfoResponse:
        """Version, API version, capabilities, limits and the default model ref."""
        response: server_info_pb2.GetServerInfoResponse = await self._unary(
            self._stub.GetServerInfo, server_info_pb2.GetServerInfoRequest(), timeout
        )
        return response

    # ------------------------------------------------------------------ plumbing
    def _call_metadata(self, request_id: str) -> tuple[tuple[str, str], ...]:
        return (*self._metadata, ("x-request-id", request_id))

    def _deadline(self, timeout: Timeout) -> float | None:
        return self._timeout if timeout is _DEFAULT else timeout

    async def _unary(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[ReqT, RespT],
        request: ReqT,
        timeout: Timeout,
    ) -> RespT:
        request_id = uuid.uuid4().hex
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
        request_id = uuid.uuid4().hex
        call = method(request, timeout=timeout, metadata=self._call_metadata(request_id))
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as err:
            raise AgentError.from_rpc_error(err, request_id=request_id) from err
        finally:
            call.cancel()  # a no-op once the call has ended; stops the RPC if the consumer left early


def _mode(mode: ModeName | int) -> session_pb2.SessionMode.ValueType:
    if isinstance(mode, str):
        try:
            return session_pb2.SessionMode.Value(f"SESSION_MODE_{mode.upper()}")
        except ValueError:
            raise ValueError(f"mode must be 'GENERAL' or 'CODING', not {mode!r}") from None
    return session_pb2.SessionMode.ValueType(mode)


def _part(part: InputPart) -> content_pb2.ContentPart:
    if isinstance(part, str):
        return content_pb2.ContentPart(text=content_pb2.TextPart(text=part))
    if isinstance(part, Image):
        return part.to_proto()
    if isinstance(part, content_pb2.ContentPart):
        return part
    raise TypeError(f"turn input parts are str, Image or ContentPart, not {type(part).__name__}")


def _parts(value: InputLike, images: Iterable[Image]) -> list[content_pb2.ContentPart]:
    parts = [_part(value)] if isinstance(value, str | Image | content_pb2.ContentPart) else [_part(p) for p in value]
    parts.extend(image.to_proto() for image in images)
    return parts
