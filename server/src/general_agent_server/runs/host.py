"""What a run's driver needs from the live session that owns the run: its ledger and hooks, its tools, the
model, credentials and deadlines, and the callback that tells it the run's task ended. The live session
implements it; the driver never sees the session's command lock or its other state."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Protocol

from general_agent_server.hooks.session_hooks import SessionHooks
from general_agent_server.model.history_encoding import HistoryEncoding
from general_agent_server.model.port import Credential, ModelClient
from general_agent_server.runs.deadlines import Deadlines
from general_agent_server.runs.state import ActiveRun
from general_agent_server.sessions.ledger import SessionLedger
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore
from general_agent_server.tools.runtime import ToolContext, ToolSet, ToolSpec


class RunHost(Protocol):
    @property
    def ledger(self) -> SessionLedger: ...

    @property
    def hooks(self) -> SessionHooks: ...

    @property
    def settings(self) -> CoreSettings: ...

    @property
    def model(self) -> ModelClient: ...

    @property
    def store(self) -> SessionStore: ...

    @property
    def history_encoding(self) -> HistoryEncoding:
        """The session's model history as encoded by its earlier calls (model/history_encoding.py)."""

    @property
    def deadlines(self) -> Deadlines: ...

    @property
    def tenant(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def workspace(self) -> Path: ...

    @property
    def session_file(self) -> str:
        """The session's transcript export (what hooks call `sessionFile`)."""

    def toolset(self) -> ToolSet: ...

    async def prepare_tools(self) -> None:
        """What the next model call's tools need started (MCP servers), started and settled."""

    def credential(self) -> Credential | None:
        """The credential a model call of this session uses now (None: none resolves)."""

    def hosted_deadline(self, spec: ToolSpec) -> timedelta: ...

    def tool_context(self, run_id: str, call_id: str) -> ToolContext: ...

    async def run_cancelled(self, run_id: str) -> None:
        """The run was stopped: what its tools started in the background dies with it."""

    async def own_run(self) -> int | None:
        """Takes the session's lease for a run continuing here (sessions/ownership.py): the stored version read
        with it, None when it was held already."""

    def disown_run(self) -> None:
        """Releases the session's lease unless a run executes here."""

    def run_task_done(self, run: ActiveRun, *, suspended: bool) -> None:
        """The run's task ended: the run finished, or it suspended on hosted calls."""
