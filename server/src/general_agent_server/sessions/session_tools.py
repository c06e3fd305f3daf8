"""The tools of one loaded session: its tool set (rebuilt only when what it depends on changes), its MCP
servers kept in step with the stored config, and what a tool call is given (context, hosted deadline)."""

from __future__ import annotations

import weakref
from datetime import timedelta

from general_agent_server.domain.session import SessionMode
from general_agent_server.mcp_servers.servers import SessionServers
from general_agent_server.sessions.loaded import LoadedSession
from general_agent_server.tools.runtime import ToolContext, ToolKind, ToolSet, ToolSpec


class SessionTools:
    def __init__(self, session: LoadedSession) -> None:
        # Weak: the session owns this object, and an evicted session must be freed without the cycle collector.
        self._ref = weakref.ref(session)
        self._toolset: tuple[object, SessionMode, object, ToolSet] | None = None
        self._mcp_config: object = None

    @property
    def _session(self) -> LoadedSession:
        session = self._ref()
        if session is None:
            raise ReferenceError("the session was freed")
        return session

    def invalidate(self) -> None:
        """The session was read again: the next model call builds its tool set anew."""
        self._toolset = None

    def toolset(self) -> ToolSet:
        """The session's tools, rebuilt only when its config, mode or ready MCP servers change (the set keeps its
        compiled argument validators between model calls). Identity, not equality: configs are replaced whole."""
        session = self._session
        deps = session.deps
        config, mode = session.record.config, session.record.identity.mode
        servers = self.mcp
        mcp_key = servers.tools_key() if servers is not None else ()
        cached = self._toolset
        if cached is None or cached[0] is not config or cached[1] is not mode or cached[2] != mcp_key:
            hosted = [
                ToolSpec(
                    name=t.name,
                    description=t.description,
                    input_schema=t.input_schema,
                    kind=ToolKind.HOSTED,
                    timeout_seconds=t.timeout_seconds,
                )
                for t in (*deps.global_hosted_tools, *config.hosted_tools)
            ]
            taken = set(deps.catalog.builtins) | {t.name for t in hosted}
            tools = deps.catalog.for_session(
                coding=mode is SessionMode.CODING,
                allowed=config.allowed_tools,
                extra=hosted,
                mcp=servers.tools(taken) if servers is not None else (),
                record=session.record,
            )
            cached = self._toolset = (config, mode, mcp_key, tools)
        return cached[3]

    @property
    def mcp(self) -> SessionServers | None:
        """The session's MCP servers, kept in step with its stored map (None: the server serves no MCP)."""
        session = self._session
        if session.deps.mcp is None:
            return None
        servers = session.deps.mcp.for_session(session.tenant, session.session_id, session.workspace)
        config = session.record.config
        if self._mcp_config is not config:
            servers.configure(config.mcp_servers, config.disabled_mcp_servers)
            self._mcp_config = config
        return servers

    async def prepare(self) -> None:
        """Before a model call: the MCP servers started and settled (at most mcp_connect_timeout)."""
        servers = self.mcp
        if servers is not None and servers.configured:
            await servers.prepare()

    def release_mcp(self) -> None:
        if self._session.deps.mcp is not None and (servers := self.mcp) is not None:
            servers.release_later()

    async def close_mcp(self) -> None:
        session = self._session
        if session.deps.mcp is not None:
            await session.deps.mcp.close_session(session.tenant, session.session_id)
            self._mcp_config = None

    def hosted_deadline(self, spec: ToolSpec) -> timedelta:
        session = self._session
        wanted = (
            spec.timeout_seconds
            or session.record.config.limits.hosted_call_timeout_seconds
            or session.settings.hosted_call_timeout
        )
        return timedelta(seconds=min(wanted, session.settings.hosted_call_timeout_max))

    def context(self, run_id: str, call_id: str) -> ToolContext:
        session = self._session
        return ToolContext(
            tenant=session.tenant,
            session_id=session.session_id,
            run_id=run_id,
            call_id=call_id,
            workspace=session.workspace,
            checkpoints=session.deps.checkpoints,
        )
