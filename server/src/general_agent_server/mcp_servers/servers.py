"""The MCP servers of the loaded sessions.

Per session: a server starts when a run first needs the session's tools, and stays connected while the
session is in use; once a run ends (or suspends) the session's servers close after `mcp_idle_timeout`
unless another run starts first. A server that failed or died is started again at its next use. Changing
the map, toggling a server off, reset, delete, eviction and shutdown close what they remove. A run's model
call waits for servers still connecting up to `mcp_connect_timeout`, then goes on without them; a server
that is not ready makes only its own tools fail."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from general_agent_server.mcp_servers.config import McpServerSpec, exposed_names, read_servers
from general_agent_server.mcp_servers.connection import McpConnection, ServerState
from general_agent_server.mcp_servers.tool import McpTool, tool_spec


@dataclass(frozen=True, kw_only=True, slots=True)
class McpSettings:
    connect_timeout: float
    call_timeout: float
    idle_timeout: float
    # Tracing is on: calls send their tool span's trace context (mcp_servers/connection.py).
    trace_context: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerStatus:
    name: str
    transport: str
    enabled: bool
    state: ServerState
    tool_count: int = 0
    error: str = ""


class SessionServers:
    """The MCP servers of one session (see the module docstring)."""

    def __init__(self, workspace: Path, settings: McpSettings) -> None:
        self._workspace = workspace
        self._settings = settings
        self._specs: dict[str, McpServerSpec] = {}
        self._disabled: frozenset[str] = frozenset()
        self._connections: dict[str, McpConnection] = {}
        self._release: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def configured(self) -> bool:
        return bool(self._specs)

    def configure(self, servers: Mapping[str, Mapping[str, Any]], disabled: tuple[str, ...]) -> None:
        """The session's map as stored now: connections whose server was removed, changed or toggled off
        close; the others stay."""
        specs = read_servers(servers)
        disabled_set = frozenset(disabled)
        for name, connection in list(self._connections.items()):
            if specs.get(name) != connection.spec or name in disabled_set:
                self._close_later(self._connections.pop(name))
        self._specs, self._disabled = specs, disabled_set

    async def prepare(self) -> None:
        """Starts what a run needs and waits for it to settle, at most `connect_timeout`."""
        self.start(restart_failed=True)
        pending = [c for c in self._connections.values() if c.state is ServerState.CONNECTING]
        if pending:
            await asyncio.gather(*(c.wait_settled(self._settings.connect_timeout) for c in pending))

    def start(self, *, restart_failed: bool = False) -> None:
        """Starts the enabled servers not started yet, and with `restart_failed` those that failed (their next
        use restarts them; a status read does not)."""
        self._cancel_release()
        for name, spec in self._specs.items():
            current = self._connections.get(name)
            if name in self._disabled or (
                current is not None and (current.state is not ServerState.FAILED or not restart_failed)
            ):
                continue
            if current is not None:
                self._close_later(current)
            connection = McpConnection(
                spec,
                cwd=self._workspace,
                call_timeout=self._settings.call_timeout,
                trace_context=self._settings.trace_context,
            )
            connection.start()
            self._connections[name] = connection

    def tools(self, taken: set[str]) -> list[McpTool]:
        """The tools of the servers that are READY, under the names the model sees."""
        ready = {name: c for name, c in self._connections.items() if c.state is ServerState.READY}
        names = exposed_names({name: [t.name for t in c.tools] for name, c in ready.items()}, taken)
        timeout = self._settings.call_timeout
        return [
            McpTool(tool_spec(server, names[(server, tool.name)], tool, timeout), connection, tool.name)
            for server, connection in ready.items()
            for tool in connection.tools
        ]

    def tools_key(self) -> tuple[tuple[str, int, str], ...]:
        """Changes whenever the tools offered may change (a server became ready, failed, or was replaced)."""
        return tuple((name, id(c), c.state.value) for name, c in sorted(self._connections.items()))

    def statuses(self) -> list[ServerStatus]:
        out = []
        for name, spec in self._specs.items():
            connection = self._connections.get(name)
            if name in self._disabled:
                state = ServerState.DISABLED
            else:
                # Not started yet reads as connecting: a status read starts it (GetMcpStatus).
                state = connection.state if connection is not None else ServerState.CONNECTING
            out.append(
                ServerStatus(
                    name=name,
                    transport=spec.transport,
                    enabled=name not in self._disabled,
                    state=state,
                    tool_count=len(connection.tools) if connection is not None and state is ServerState.READY else 0,
                    error=connection.error if connection is not None and state is ServerState.FAILED else "",
                )
            )
        return out

    def release_later(self) -> None:
        """The session's run ended: its servers close after the idle timeout unless a run needs them first."""
        self._cancel_release()
        if self._connections:
            loop = asyncio.get_running_loop()
            self._release = loop.call_later(self._settings.idle_timeout, self._release_now)

    def _release_now(self) -> None:
        self._release = None
        for name in list(self._connections):
            self._close_later(self._connections.pop(name))

    def _cancel_release(self) -> None:
        if self._release is not None:
            self._release.cancel()
            self._release = None

    def _close_later(self, connection: McpConnection) -> None:
        task = asyncio.create_task(connection.close(), name=f"mcp-close-{connection.spec.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Every connection closes (and its stdio process is gone) before this returns."""
        self._cancel_release()
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), *self._closing, return_exceptions=True)


class McpServers:
    """The SessionServers of every loaded session, by (tenant, session id)."""

    def __init__(self, settings: McpSettings) -> None:
        self._settings = settings
        self._sessions: dict[tuple[str, str], SessionServers] = {}

    def send_trace_context(self) -> None:
        """Tracing is on (set at start, before sessions load): tool calls send their span's trace context."""
        self._settings = replace(self._settings, trace_context=True)

    def for_session(self, tenant: str, session_id: str, workspace: Path) -> SessionServers:
        key = (tenant, session_id)
        servers = self._sessions.get(key)
        if servers is None:
            servers = self._sessions[key] = SessionServers(workspace, self._settings)
        return servers

    async def close_session(self, tenant: str, session_id: str) -> None:
        servers = self._sessions.pop((tenant, session_id), None)
        if servers is not None:
            await servers.close()

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
