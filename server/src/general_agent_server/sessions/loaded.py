"""What the parts a loaded session owns (its tools, its replica sync, its remote tail) read of that session.

They hold the session weakly and see it through this Protocol, so they do not import the session's module
(sessions/live.py imports them)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from general_agent_server.hooks.session_hooks import HookScope
from general_agent_server.runs.deadlines import Deadlines
from general_agent_server.runs.state import ActiveRun
from general_agent_server.sessions.deps import SessionDeps
from general_agent_server.sessions.ledger import SessionLedger
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore


class CachedTools(Protocol):
    def invalidate(self) -> None: ...


class LoadedSession(HookScope, Protocol):
    """Its identity (tenant, session id, record) as its hooks see it, and what its owned parts use."""

    # The run executing or suspended here; ReplicaSync clears it when the stored session moved on.
    run: ActiveRun | None

    @property
    def deps(self) -> SessionDeps: ...
    @property
    def ledger(self) -> SessionLedger: ...
    @property
    def deadlines(self) -> Deadlines: ...
    @property
    def tools(self) -> CachedTools: ...
    @property
    def settings(self) -> CoreSettings: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def live_point(self) -> int: ...
    @property
    def owns_run(self) -> bool: ...

    def restore_suspension(self, run: ActiveRun) -> None: ...
