"""Authentication of every RPC (docs/security.md): the caller found by the authenticator (a bearer token, else a
mapped client certificate) lives in a ContextVar for the servicer's CallContext; a call without valid
credentials ends UNAUTHENTICATED before its handler runs. Health and reflection may stay open (settings
auth_open_health, auth_open_reflection)."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from general_agent_server.api.errors import abort
from general_agent_server.api.handlers import refused_stream, with_behaviour
from general_agent_server.auth import OPERATOR, Authenticator, Caller
from general_agent_server.domain.errors import ServiceError

HEALTH_PREFIX = "/grpc.health.v1.Health/"
REFLECTION_PREFIXES = ("/grpc.reflection.v1alpha.ServerReflection/", "/grpc.reflection.v1.ServerReflection/")

_caller: contextvars.ContextVar[Caller] = contextvars.ContextVar("caller", default=OPERATOR)


def current_caller() -> Caller:
    return _caller.get()


def open_prefixes(*, health: bool, reflection: bool) -> tuple[str, ...]:
    return (HEALTH_PREFIX,) * health + REFLECTION_PREFIXES * reflection


def peer_names(context: Any) -> list[str]:
    """The verified client certificate's common name and subject alternative names (empty without mTLS)."""
    try:
        properties = context.auth_context()
    except Exception:  # a context without a transport (never on a real server)
        return []
    names: list[str] = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in properties.get(key, ()):
            names.append(value.decode(errors="replace") if isinstance(value, bytes) else str(value))
    return names


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, authenticator: Authenticator, *, open_prefixes: tuple[str, ...] = ()) -> None:
        self._authenticator = authenticator
        self._open = open_prefixes

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = str(handler_call_details.method)
        if handler is None or not self._authenticator.enabled or method.startswith(self._open):
            return handler
        return with_behaviour(handler, unary=self._wrap_unary, stream=self._wrap_stream)

    async def _caller(self, context: Any) -> Caller:
        try:
            return self._authenticator.authenticate(context.invocation_metadata() or (), peer_names(context))
        except ServiceError as error:
            await abort(context, error)

    def _wrap_unary(self, behavior: Any) -> Any:
        async def wrapped(request: Any, context: Any) -> Any:
            # Not reset: each call runs in a task of its own, and the access log line (api/interceptors.py),
            # written after this returns, names the tenant.
            _caller.set(await self._caller(context))
            return await behavior(request, context)

        return wrapped

    def _wrap_stream(self, behavior: Any) -> Any:
        # Not a generator itself (api/interceptors.py holds the call's one generator): a valid caller gets the
        # servicer's stream as it is. It runs in the call's task, so the caller set here is the stream's.
        def wrapped(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                caller = self._authenticator.authenticate(context.invocation_metadata() or (), peer_names(context))
            except ServiceError as error:
                return refused_stream(context, error)
            _caller.set(caller)
            stream: AsyncIterator[Any] = behavior(request, context)
            return stream

        return wrapped
