"""What every RPC module of the servicer shares (api/servicer.py composes them): the caller's CallContext, the
decorators through which every error leaves (api/errors.abort), and the base holding the agent (agent.py)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc

from general_agent_server.agent import Agent
from general_agent_server.api.auth_interceptor import current_caller
from general_agent_server.api.errors import abort
from general_agent_server.api.interceptors import current_request_id
from general_agent_server.domain.context import CallContext

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
Req = TypeVar("Req")
Resp = TypeVar("Resp")


def call_context(context: Context) -> CallContext:
    """The caller the auth interceptor found (api/auth_interceptor.py); without authentication configured, the
    operator (tenant `default`, role admin)."""
    caller = current_caller()
    return CallContext(tenant=caller.tenant, role=caller.role, request_id=current_request_id())


def unary(
    fn: Callable[[Any, Req, Context], Awaitable[Resp]],
) -> Callable[[Any, Req, Context], Awaitable[Resp]]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: Context) -> Resp:
        try:
            return await fn(self, request, context)
        except Exception as exc:  # every error leaves through one function
            await abort(context, exc)

    return wrapper


def server_stream(
    fn: Callable[[Any, Req, Context], AsyncIterator[Resp]],
) -> Callable[[Any, Req, Context], AsyncIterator[Resp]]:
    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: Context) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except Exception as exc:
            await abort(context, exc)

    return wrapper


class AgentRpcs:
    """The base of every RPC family: each converts its requests, calls one of the agent's services and converts
    the answer."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
