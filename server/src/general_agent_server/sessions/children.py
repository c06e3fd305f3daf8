"""Subagent children: sessions a parent's `subagents` tool creates and drives (tools/subagents.py). A child is
stored with its parent (`parent_session_id`), carries the parent's in-memory key, runs one turn through the
run control like any other, and is stopped with its parent."""

from __future__ import annotations

from collections.abc import AsyncIterator

from general_agent_server.domain.content import TextPart
from general_agent_server.domain.context import CallContext
from general_agent_server.domain.events import RunReason, SequencedEvent
from general_agent_server.domain.session import SessionConfig, SessionIdentity
from general_agent_server.model.credentials import SessionKeys
from general_agent_server.runs.control import RunControl
from general_agent_server.runs.state import BusyPolicy, OnDisconnect, TurnOptions
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.live import LiveSession
from general_agent_server.sessions.service import SessionService
from general_agent_server.store.port import WriteBatch


class ChildSessions:
    """Implements the subagents tool's ChildSessions port."""

    def __init__(
        self, *, sessions: SessionService, control: RunControl, cache: SessionCache, keys: SessionKeys
    ) -> None:
        self._sessions = sessions
        self._control = control
        self._cache = cache
        self._keys = keys

    def loaded(self, tenant: str, session_id: str) -> LiveSession | None:
        return self._cache.peek(tenant, session_id)

    async def create(
        self, tenant: str, *, parent_session_id: str, identity: SessionIdentity, config: SessionConfig, agent_id: str
    ) -> None:
        record = self._sessions.new_record(tenant, identity, config, parent_session_id=parent_session_id)
        await self._sessions.insert(record, WriteBatch(tenant=tenant, session_id=identity.session_id))
        child = self._cache.new_session(record, [])
        child.hooks.agent_id = agent_id
        await self._cache.adopt(child)
        self._keys.set(tenant, identity.session_id, self._keys.get(tenant, parent_session_id))

    def run(self, tenant: str, session_id: str, task: str) -> AsyncIterator[SequencedEvent]:
        return self._control.stream_turn(
            CallContext(tenant=tenant),
            session_id,
            (TextPart(text=task),),
            options=TurnOptions(busy_policy=BusyPolicy.REJECT, on_disconnect=OnDisconnect.CANCEL),
        )

    async def stop(self, tenant: str, session_id: str) -> None:
        """The parent's run was stopped or cancelled: the child's run ends too, and is waited for."""
        child = self._cache.peek(tenant, session_id)
        if child is not None:
            await child.stop(RunReason.CANCELLED)

    def last_text(self, tenant: str, session_id: str) -> str:
        child = self._cache.peek(tenant, session_id)
        if child is None:
            return ""
        last = next((m for m in reversed(child.history) if m.role == "assistant"), None)
        if last is None:
            return ""
        return "\n".join(str(b.get("text", "")) for b in last.content if b.get("type") == "text")
