"""An ergonomic asyncio client for ``general_agent.v1.AgentService`` (docs/python-client.md).

Example::

    async with await AgentClient.connect("127.0.0.1:50051") as client:

        @client.hosted_tool("weather")
        async def weather(city: str) -> str:
            return f"sunny in {city}"

        session = await client.create_session(system_prompt="Be brief.")  # declares `weather`
        result = await client.run(session.identity.session_id, "Weather in Paris?")
        print(result.text)

Every RPC of the service has a method here (:data:`RPC_METHODS` maps each to its method) taking keyword
arguments, returning the generated messages for resources (``Session``, ``Checkpoint`` ...) and raising
:class:`~general_agent.errors.AgentError` (a subclass per common reason) instead of ``grpc.aio.AioRpcError``.
Each call sends a fresh ``x-request-id`` so it can be found in the server log. Unary calls get a 30 s
deadline by default (``timeout=`` per call, ``None`` for no deadline); streams have none unless given.
Idempotent calls are retried on UNAVAILABLE by gRPC's retry policy (see ``general_agent._transport``).
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Final

import grpc

from general_agent import _convert as conv
from general_agent._admin import AdminMixin, mcp_http, mcp_stdio
from general_agent._convert import BusyPolicyName, Image, InputLike, ModeName, OnDisconnectName
from general_agent._sessions import SessionsMixin
from general_agent._transport import (
    DEFAULT_TIMEOUT,
    ChannelOption,
    MetadataLike,
    base_metadata,
    channel_options,
    open_channel,
)
from general_agent._turns import TurnResult, TurnsMixin
from general_agent.errors import AgentError
from general_agent.runner import OnApproval, OnHostedCall, Run
from general_agent.tools import HostedToolRegistry, ToolHandler
from general_agent.v1 import hosted_tool_pb2

__all__ = [
    "DEFAULT_TIMEOUT",
    "RPC_METHODS",
    "AgentClient",
    "BusyPolicyName",
    "Image",
    "InputLike",
    "ModeName",
    "OnDisconnectName",
    "TurnResult",
    "mcp_http",
    "mcp_stdio",
]

RPC_METHODS: Final[dict[str, str]] = {
    "CreateSession": "create_session",
    "GetSession": "get_session",
    "ListSessions": "list_sessions",
    "DeleteSession": "delete_session",
    "ResumeSession": "resume_session",
    "ContinueSession": "continue_session",
    "ForkSession": "fork_session",
    "ResetSession": "reset_session",
    "GetSessionHistory": "history",
    "StreamTurn": "stream_turn",
    "SubmitHostedToolResult": "submit_hosted_result",
    "ResolveApproval": "resolve_approval",
    "RunSession": "run",
    "WatchSession": "watch",
    "InjectMessage": "inject",
    "RequestStop": "request_stop",
    "ClearStop": "clear_stop",
    "CancelRun": "cancel_run",
    "RequestCompaction": "request_compaction",
    "MaybeCompactByTokens": "maybe_compact",
    "GetUsage": "usage",
    "ListCheckpoints": "list_checkpoints",
    "RestoreCheckpoint": "restore_checkpoint",
    "SetMcpServers": "set_mcp_servers",
    "GetMcpServers": "get_mcp_servers",
    "ToggleMcpServer": "toggle_mcp_server",
    "GetMcpStatus": "mcp_status",
    "RegisterHooks": "register_hooks",
    "UnregisterHooks": "unregister_hooks",
    "ListHookRegistrations": "list_hook_registrations",
    "EmitHook": "emit_hook",
    "GetServerInfo": "server_info",
}
"""Each AgentService RPC and the :class:`AgentClient` method that calls it."""


class AgentClient(SessionsMixin, TurnsMixin, AdminMixin):
    """Async client for AgentService.

    Build it with ``await AgentClient.connect(address)`` (waits until the channel is ready) or
    ``AgentClient(address)`` inside a running event loop, and close it with ``await client.close()`` or
    ``async with``.

    Args:
        address: ``host:port`` of the server.
        token: a bearer token, sent as ``authorization: Bearer <token>`` with every call.
        tls: use TLS with the system's roots (implied by ``root_certificates`` or ``credentials``).
        root_certificates: PEM roots to verify the server with (a private CA).
        credentials: full channel credentials (mTLS: ``grpc.ssl_channel_credentials(roots, key, chain)``).
        metadata: more metadata sent with every call.
        timeout: the default deadline of unary calls in seconds (``None``: none).
        retries: retry idempotent calls on UNAVAILABLE through the channel's service config.
        options: extra gRPC channel options.
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: MetadataLike | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retries: bool = True,
        options: Sequence[ChannelOption] = (),
        secure: bool = False,
    ) -> None:
        channel = open_channel(
            address,
            tls=tls or secure,
            root_certificates=root_certificates,
            credentials=credentials,
            options=channel_options(options, retries=retries),
        )
        self._init(address, channel, owns_channel=True, metadata=base_metadata(metadata, token), timeout=timeout)
        self._tools = HostedToolRegistry()

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        token: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: MetadataLike | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float | None = 10.0,
        retries: bool = True,
        options: Sequence[ChannelOption] = (),
        secure: bool = False,
    ) -> AgentClient:
        """Opens a channel and waits until it is ready (``connect_timeout`` seconds, ``None`` = no wait).

        Raises AgentError(UNAVAILABLE) when the server cannot be reached in time.
        """
        client = cls(
            address,
            token=token,
            tls=tls or secure,
            root_certificates=root_certificates,
            credentials=credentials,
            metadata=metadata,
            timeout=timeout,
            retries=retries,
            options=options,
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
        token: str | None = None,
        metadata: MetadataLike | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> AgentClient:
        """Wraps an existing channel; :meth:`close` leaves it open (its owner closes it)."""
        client = cls.__new__(cls)
        client._init("", channel, owns_channel=False, metadata=base_metadata(metadata, token), timeout=timeout)
        client._tools = HostedToolRegistry()
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

    # ------------------------------------------------------------------ hosted tools and run()
    def hosted_tool(
        self, name: str | None = None, *, description: str | None = None, timeout: float | None = None
    ) -> Callable[[ToolHandler], ToolHandler]:
        """Registers an async handler as the hosted tool ``name`` (default: the function's name); see
        :mod:`general_agent.tools`. :meth:`create_session` declares the registered tools and :meth:`run`
        answers their calls."""
        return self._tools.decorator(name, description=description, timeout=timeout)

    @property
    def hosted_tools(self) -> HostedToolRegistry:
        """The hosted tools registered with :meth:`hosted_tool`."""
        return self._tools

    def _registered_tools(self) -> list[hosted_tool_pb2.HostedToolDefinition]:
        return self._tools.definitions()

    def run(
        self,
        session_id: str,
        text_or_parts: InputLike,
        *,
        images: Iterable[Image] = (),
        on_approval: OnApproval | None = None,
        on_hosted_call: OnHostedCall | None = None,
        request_id: str = "",
        busy_policy: BusyPolicyName = "REJECT",
        reconnect_timeout: float = 60.0,
    ) -> Run:
        """Starts one run over RunSession and drives it to its end: registered hosted tools are executed
        and answered, approvals go to ``on_approval`` (which returns an
        :class:`~general_agent.runner.ApprovalAnswer`, a bool or ``"always"``), hosted calls of tools without
        a registered handler to ``on_hosted_call`` (when given), and a dropped stream is
        reattached after the last sequence seen (for up to ``reconnect_timeout`` seconds without contact).

        ``async for event in client.run(...)`` yields the run's typed events; ``await client.run(...)``
        returns its :class:`~general_agent.runner.RunResult`. Leaving the iteration early cancels the run.
        """
        return Run(
            self,
            session_id,
            conv.parts(text_or_parts, images),
            on_approval=on_approval,
            on_hosted_call=on_hosted_call,
            request_id=request_id,
            busy_policy=busy_policy,
            reconnect_timeout=reconnect_timeout,
        )
