"""What the parts a loaded session owns read of that session: its tools, its replica sync and its remote tail
(`LoadedSession`), and the command parts that apply its commands (`CommandedSession`).

They hold the session weakly or take it as an argument, and see it through these Protocols, so they do not
import the session's module (sessions/live.py imports them)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from general_agent_server.domain.history import HistoryMessage
from general_agent_server.hooks.session_hooks import HookScope
from general_agent_server.model.port import Credential
from general_agent_server.runs.deadlines import Deadlines
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.state import ActiveRun, Resolution
from general_agent_server.sessions.deps import SessionDeps
from general_agent_server.sessions.ledger import SessionLedger
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore
from general_agent_server.tenants.slots import RunSlot


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


class CommandTools(CachedTools, Protocol):
    async def close_mcp(self) -> None: ...


class SyncedCopy(Protocol):
    """The session's replica sync (sessions/replica_sync.py), as its commands use it."""

    async def revalidate(self) -> bool: ...
    async def revalidate_locked(self, taken_version: int | None = None) -> bool: ...


class CommandedSession(LoadedSession, RunHost, Protocol):
    """What the command parts (sessions/turn_admission.py, hosted_answers.py, steering.py, session_commands.py)
    use. The session takes its command lock around them; they change the run's state only through `run` and
    the slot methods below."""

    @property
    def history(self) -> list[HistoryMessage]: ...
    @property
    def tools(self) -> CommandTools: ...
    @property
    def sync(self) -> SyncedCopy: ...
    @property
    def runs_elsewhere(self) -> bool: ...

    def require_credential(self) -> Credential: ...

    def hold_slot(self, slot: RunSlot | None) -> None:
        """The run slot the run now executing holds (released when its task ends)."""

    def release_slot(self) -> None: ...

    def resumed(self, resolution: Resolution) -> Resolution:
        """A suspended run an answer continued holds a slot again."""
