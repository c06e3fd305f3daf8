"""Request id, access logging and the error status of every RPC. The request id (from `x-request-id`, else
generated) lives in a ContextVar so every log line of the call carries it. Bodies are never logged. Every
exception a call raises leaves through one function, api/errors.abort, as the rich status it maps to; the
servicers raise and never build statuses themselves."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from general_agent_server.api.errors import abort
from general_agent_server.api.handlers import with_behaviour
from general_agent_server.observability.port import Observer

logger = logging.getLogger("general_agent_server.access")

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


def current_request_id() -> str:
    return _request_id.get()


def _incoming_request_id(details: grpc.HandlerCallDetails) -> str:
    for key, value in details.invocation_metadata or ():
        if key == "x-request-id" and isinstance(value, str) and 0 < len(value) <= 128:
            return value
    return uuid.uuid4().hex


class RequestContextInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, observer: Observer | None = None) -> None:
        # Told every RPC's latency and code (observability/port.py).
        self._observer = observer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
        request_id = _incoming_request_id(handler_call_details)
        return with_behaviour(
            handler,
            unary=lambda behaviour: _wrap_unary(behaviour, method, request_id, self._observer),
            stream=lambda behaviour: _wrap_stream(behaviour, method, request_id, self._observer),
        )


def _log(method: str, context: Any, started: float, error: BaseException | None, observer: Observer | None) -> None:
    code = context.code()
    if error is not None and code is None:
        code = grpc.StatusCode.CANCELLED if isinstance(error, asyncio.CancelledError) else grpc.StatusCode.UNKNOWN
    name = code.name if isinstance(code, grpc.StatusCode) else ("OK" if code is None else str(code))
    seconds = time.perf_counter() - started
    if observer is not None:
        observer.rpc(method, name, seconds)
    logger.info(
        "%s %s %.1fms",
        method,
        name,
        seconds * 1000,
        extra={"category": "system", "rpc": method, "code": name},
    )


class _Observed:
    """Around one call's behaviour: its request id is current, and its end is logged and observed. A class, not a
    generator context manager: it is entered once per call and lives as long as the call (every watch stream)."""

    __slots__ = ("_context", "_method", "_observer", "_request_id", "_started", "_token")

    def __init__(self, method: str, context: Any, request_id: str, observer: Observer | None) -> None:
        self._method, self._context, self._request_id, self._observer = method, context, request_id, observer

    def __enter__(self) -> None:
        self._token = _request_id.set(self._request_id)
        self._started = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        _log(self._method, self._context, self._started, error, self._observer)
        # A stream closed from another task runs this in another context.
        with contextlib.suppress(ValueError):
            _request_id.reset(self._token)


def _wrap_unary(behavior: Any, method: str, request_id: str, observer: Observer | None) -> Any:
    async def wrapped(request: Any, context: Any) -> Any:
        with _Observed(method, context, request_id, observer):
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await abort(context, exc)

    return wrapped


def _wrap_stream(behavior: Any, method: str, request_id: str, observer: Observer | None) -> Any:
    # The one generator between gRPC and the servicer's stream: the layers below hand their streams up as they
    # are, since every generator layer holds a frame for as long as a stream is open (a watch, for hours).
    async def wrapped(request: Any, context: Any) -> AsyncIterator[Any]:
        with _Observed(method, context, request_id, observer):
            try:
                async for item in behavior(request, context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await abort(context, exc)

    return wrapped
