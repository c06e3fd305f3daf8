"""The MCP RPCs: SetMcpServers (replaces the whole map; disabled markers of removed servers go with them),
GetMcpServers (header and env values masked), ToggleMcpServer (unknown ⇒ NOT_FOUND `MCP_SERVER_NOT_FOUND`) and
GetMcpStatus. A change is a commit of the session's config; connections follow it (mcp_servers/servers.py).
Reading the status starts the enabled servers that are not connected, so it reports what they really do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from general_agent_server.domain.context import CallContext
from general_agent_server.domain.errors import ErrorCode, ServiceError, quoted
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.validation import check_session_id, check_token
from general_agent_server.mcp_servers.admission import check_servers
from general_agent_server.mcp_servers.config import masked
from general_agent_server.mcp_servers.servers import ServerStatus
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.idempotency import IdempotencyKeys
from general_agent_server.sessions.live import LiveSession
from general_agent_server.sessions.settings import CoreSettings


def server_not_found(session_id: str, name: str) -> ServiceError:
    return ServiceError(
        ErrorCode.NOT_FOUND,
        "MCP_SERVER_NOT_FOUND",
        f"session {quoted(session_id)} has no MCP server {quoted(name)}",
        metadata={"server_name": name[:64]},
    )


class McpService:
    def __init__(self, *, cache: SessionCache, keys: IdempotencyKeys, settings: CoreSettings) -> None:
        self._cache = cache
        self._keys = keys
        self._settings = settings

    async def set_servers(
        self, ctx: CallContext, session_id: str, servers: Mapping[str, Mapping[str, Any]]
    ) -> list[ServerStatus]:
        check_session_id(session_id)
        await check_servers(
            ctx,
            servers,
            "servers",
            stdio_allow=self._settings.mcp_stdio_allow,
            ssrf_allow_hosts=self._settings.ssrf_allow_hosts,
        )

        def change(record: SessionRecord) -> dict[str, object]:
            config = record.config
            disabled = tuple(name for name in config.disabled_mcp_servers if name in servers)
            return {"config": replace(config, mcp_servers=dict(servers), disabled_mcp_servers=disabled)}

        async with self._cache.use(ctx.tenant, session_id) as session:
            await session.change(change, self._keys.keyed(ctx.tenant, "SetMcpServers", None), {})
            return _statuses(session)

    async def get_servers(self, ctx: CallContext, session_id: str) -> tuple[dict[str, dict[str, Any]], tuple[str, ...]]:
        check_session_id(session_id)
        async with self._cache.use(ctx.tenant, session_id) as session:
            config = session.record.config
            return masked(config.mcp_servers), config.disabled_mcp_servers

    async def toggle(self, ctx: CallContext, session_id: str, name: str, enabled: bool) -> ServerStatus:
        check_session_id(session_id)
        check_token("server_name", name, required=True)

        def change(record: SessionRecord) -> dict[str, object]:
            config = record.config
            if name not in config.mcp_servers:
                raise server_not_found(session_id, name)
            disabled = [n for n in config.disabled_mcp_servers if n != name] + ([] if enabled else [name])
            if tuple(disabled) == config.disabled_mcp_servers:
                return {}
            return {"config": replace(config, disabled_mcp_servers=tuple(disabled))}

        async with self._cache.use(ctx.tenant, session_id) as session:
            await session.change(change, self._keys.keyed(ctx.tenant, "ToggleMcpServer", None), {})
            return next(s for s in _statuses(session) if s.name == name)

    async def status(self, ctx: CallContext, session_id: str) -> list[ServerStatus]:
        check_session_id(session_id)
        async with self._cache.use(ctx.tenant, session_id) as session:
            return _statuses(session)


def _statuses(session: LiveSession) -> list[ServerStatus]:
    servers = session.mcp
    if servers is None:
        return []
    servers.start()
    if session.run is None:  # started for the read: they close after the idle timeout unless a run needs them
        servers.release_later()
    return servers.statuses()
