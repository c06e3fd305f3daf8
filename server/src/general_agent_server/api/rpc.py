"""What every RPC module of the servicer shares (api/servicer.py composes them): the caller's CallContext and the
base holding the agent (agent.py). Errors are raised, not answered: api/interceptors.py ends every call that
raises with the status api/errors.abort maps it to."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from general_agent_server.agent import Agent
from general_agent_server.api.auth_interceptor import current_caller
from general_agent_server.api.interceptors import current_request_id
from general_agent_server.domain.context import CallContext

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


def call_context(context: Context) -> CallContext:
    """The caller the auth interceptor found (api/auth_interceptor.py); without authentication configured, the
    operator (tenant `default`, role admin)."""
    caller = current_caller()
    return CallContext(tenant=caller.tenant, role=caller.role, request_id=current_request_id())


class AgentRpcs:
    """The base of every RPC family: each converts its requests, calls one of the agent's services and converts
    the answer."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
