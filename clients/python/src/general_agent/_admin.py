"""Compaction, usage, checkpoint, MCP, hook-registration and server RPCs of
:class:`~general_agent.AgentClient` (docs/protocol.md)."""

# ruff: noqa: ASYNC109

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from general_agent import _convert as conv
from general_agent._transport import DEFAULT, Timeout, Transport, follow_pages, new_id
from general_agent.v1 import (
    checkpoint_pb2,
    hook_pb2,
    hook_registration_pb2,
    mcp_pb2,
    server_info_pb2,
    session_messages_pb2,
)

McpServers = Mapping[str, mcp_pb2.McpServerConfig]


def mcp_stdio(
    command: str, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None, cwd: str = ""
) -> mcp_pb2.McpServerConfig:
    """An MCP server the server starts as a subprocess (stdio transport)."""
    return mcp_pb2.McpServerConfig(stdio=mcp_pb2.McpStdioServer(command=command, args=args, env=env or {}, cwd=cwd))


def mcp_http(url: str, *, headers: Mapping[str, str] | None = None) -> mcp_pb2.McpServerConfig:
    """An MCP server reached over streamable HTTP."""
    return mcp_pb2.McpServerConfig(http=mcp_pb2.McpHttpServer(url=url, headers=headers or {}))


class AdminMixin(Transport):
    # ------------------------------------------------------------------ compaction and usage
    async def request_compaction(
        self, session_id: str, *, instructions: str = "", request_id: str = "", timeout: Timeout = DEFAULT
    ) -> session_messages_pb2.CompactionResult:
        """Compacts the history now (a failed summary is in ``result.error``; SessionBusy while a run is
        active or suspended)."""
        request = session_messages_pb2.RequestCompactionRequest(
            session_id=session_id, instructions=instructions, request_id=request_id or new_id()
        )
        response: session_messages_pb2.RequestCompactionResponse = await self._unary(
            self._stub.RequestCompaction, request, timeout
        )
        return response.result

    async def maybe_compact(
        self,
        session_id: str,
        *,
        threshold_pct: int = 0,
        cooldown: float | None = None,
        request_id: str = "",
        timeout: Timeout = DEFAULT,
    ) -> session_messages_pb2.CompactionResult:
        """MaybeCompactByTokens: compacts when the context is at least ``threshold_pct`` full (0 = the
        server default, 85) and the last compaction is older than ``cooldown`` seconds."""
        request = session_messages_pb2.MaybeCompactByTokensRequest(
            session_id=session_id,
            threshold_pct=threshold_pct,
            cooldown=conv.duration(cooldown),
            request_id=request_id or new_id(),
        )
        response: session_messages_pb2.MaybeCompactByTokensResponse = await self._unary(
            self._stub.MaybeCompactByTokens, request, timeout
        )
        return response.result

    async def usage(self, session_id: str, *, timeout: Timeout = DEFAULT) -> session_messages_pb2.GetUsageResponse:
        """GetUsage: the usage snapshot (context fill) and the cumulative usage of the session."""
        request = session_messages_pb2.GetUsageRequest(session_id=session_id)
        response: session_messages_pb2.GetUsageResponse = await self._unary(self._stub.GetUsage, request, timeout)
        return response

    # ------------------------------------------------------------------ checkpoints
    async def list_checkpoints_page(
        self, session_id: str, *, page_size: int = 0, page_token: str = "", timeout: Timeout = DEFAULT
    ) -> tuple[list[checkpoint_pb2.Checkpoint], str]:
        """One page of checkpoints (newest first) and the next page token."""
        request = checkpoint_pb2.ListCheckpointsRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        response: checkpoint_pb2.ListCheckpointsResponse = await self._unary(
            self._stub.ListCheckpoints, request, timeout
        )
        return list(response.checkpoints), response.next_page_token

    async def list_checkpoints(
        self, session_id: str, *, page_size: int = 0, timeout: Timeout = DEFAULT
    ) -> AsyncGenerator[checkpoint_pb2.Checkpoint, None]:
        """Every checkpoint of the session, newest first, following page tokens."""
        pages = follow_pages(
            lambda token: self.list_checkpoints_page(session_id, page_size=page_size, page_token=token, timeout=timeout)
        )
        async for checkpoint in pages:
            yield checkpoint

    async def restore_checkpoint(
        self, session_id: str, checkpoint_id: str, *, request_id: str = "", timeout: Timeout = DEFAULT
    ) -> checkpoint_pb2.RestoreCheckpointResponse:
        """Rewinds the workspace to before ``checkpoint_id`` (and every later one). Raises
        CheckpointNotFound."""
        request = checkpoint_pb2.RestoreCheckpointRequest(
            session_id=session_id, checkpoint_id=checkpoint_id, request_id=request_id or new_id()
        )
        response: checkpoint_pb2.RestoreCheckpointResponse = await self._unary(
            self._stub.RestoreCheckpoint, request, timeout
        )
        return response

    # ------------------------------------------------------------------ MCP
    async def set_mcp_servers(
        self, session_id: str, servers: McpServers, *, timeout: Timeout = DEFAULT
    ) -> list[mcp_pb2.McpServerStatus]:
        """Replaces the session's MCP servers (build them with :func:`mcp_stdio` / :func:`mcp_http`)."""
        request = mcp_pb2.SetMcpServersRequest(session_id=session_id, servers=dict(servers))
        response: mcp_pb2.SetMcpServersResponse = await self._unary(self._stub.SetMcpServers, request, timeout)
        return list(response.statuses)

    async def get_mcp_servers(
        self, session_id: str, *, timeout: Timeout = DEFAULT
    ) -> tuple[dict[str, mcp_pb2.McpServerConfig], list[str]]:
        """The session's MCP servers (header and env values masked) and the names of the disabled ones."""
        request = mcp_pb2.GetMcpServersRequest(session_id=session_id)
        response: mcp_pb2.GetMcpServersResponse = await self._unary(self._stub.GetMcpServers, request, timeout)
        return dict(response.servers), list(response.disabled_servers)

    async def toggle_mcp_server(
        self, session_id: str, server_name: str, enabled: bool, *, timeout: Timeout = DEFAULT
    ) -> mcp_pb2.McpServerStatus:
        """Enables or disables one MCP server of the session. Raises McpServerNotFound."""
        request = mcp_pb2.ToggleMcpServerRequest(session_id=session_id, server_name=server_name, enabled=enabled)
        response: mcp_pb2.ToggleMcpServerResponse = await self._unary(self._stub.ToggleMcpServer, request, timeout)
        return response.status

    async def mcp_status(self, session_id: str, *, timeout: Timeout = DEFAULT) -> list[mcp_pb2.McpServerStatus]:
        """GetMcpStatus: each MCP server's transport, state (CONNECTING, READY ...), tool count and error."""
        request = mcp_pb2.GetMcpStatusRequest(session_id=session_id)
        response: mcp_pb2.GetMcpStatusResponse = await self._unary(self._stub.GetMcpStatus, request, timeout)
        return list(response.statuses)

    # ------------------------------------------------------------------ hooks
    async def register_hooks(
        self, registration: hook_registration_pb2.HookRegistration, *, timeout: Timeout = DEFAULT
    ) -> hook_registration_pb2.HookRegistration:
        """RegisterHooks for the caller's tenant (replacing that plugin_id's registration); returns it as
        stored. :class:`~general_agent.HookServer` builds the registration from its handlers."""
        request = hook_registration_pb2.RegisterHooksRequest(registration=registration)
        response: hook_registration_pb2.RegisterHooksResponse = await self._unary(
            self._stub.RegisterHooks, request, timeout
        )
        return response.registration

    async def unregister_hooks(self, plugin_id: str, *, session_id: str = "", timeout: Timeout = DEFAULT) -> bool:
        """UnregisterHooks; False when there was no such registration."""
        request = hook_registration_pb2.UnregisterHooksRequest(plugin_id=plugin_id, session_id=session_id)
        response: hook_registration_pb2.UnregisterHooksResponse = await self._unary(
            self._stub.UnregisterHooks, request, timeout
        )
        return response.removed

    async def list_hook_registrations(
        self, *, session_id: str = "", timeout: Timeout = DEFAULT
    ) -> list[hook_registration_pb2.HookRegistration]:
        """The tenant's registrations (with ``session_id``: that session's too)."""
        request = hook_registration_pb2.ListHookRegistrationsRequest(session_id=session_id)
        response: hook_registration_pb2.ListHookRegistrationsResponse = await self._unary(
            self._stub.ListHookRegistrations, request, timeout
        )
        return list(response.registrations)

    async def emit_hook(
        self,
        hook_name: str,
        event: Mapping[str, Any] | None = None,
        *,
        session_id: str = "",
        context: hook_pb2.HookContext | None = None,
        timeout: Timeout = DEFAULT,
    ) -> hook_registration_pb2.EmitHookResponse:
        """Runs the hook ``hook_name`` (e.g. ``"message_received"``) with the service's merge rules and
        returns ``{result, handler_count, handler_errors}``; an unknown name ⇒ INVALID_ARGUMENT."""
        request = hook_registration_pb2.EmitHookRequest(
            hook_name=hook_name, event=conv.struct(event or {}), context=context, session_id=session_id
        )
        response: hook_registration_pb2.EmitHookResponse = await self._unary(self._stub.EmitHook, request, timeout)
        return response

    # ------------------------------------------------------------------ server
    async def server_info(self, *, timeout: Timeout = DEFAULT) -> server_info_pb2.GetServerInfoResponse:
        """Version, API version, capabilities, limits and the default model ref."""
        response: server_info_pb2.GetServerInfoResponse = await self._unary(
            self._stub.GetServerInfo, server_info_pb2.GetServerInfoRequest(), timeout
        )
        return response
