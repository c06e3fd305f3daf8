"""The SessionStore port. Any implementation must pass the suite in tests/conformance/store_suite.py.

Designed for several replicas from the start (spec 8.1): every state write is a compare-and-set on the
session `version`, the session actor holds a lease, and `notify` is the seam through which another
replica would learn of new events (a no-op with a single process)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from general_agent_server.core.checkpoints import CheckpointStore
from general_agent_server.core.events import SequencedEvent
from general_agent_server.core.history import HistoryMessage
from general_agent_server.core.runs import IdempotencyRecord, RunRecord, ToolCallRecord
from general_agent_server.core.session import SessionMode, SessionRecord
from general_agent_server.core.transcript import TranscriptEntry


class StoreError(Exception):
    """The store failed; callers report INTERNAL."""


class SessionExistsError(StoreError):
    """create_session found the id taken."""


class VersionConflictError(StoreError):
    """A compare-and-set write found another version than expected."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionQuery:
    """Filters of ListSessions."""

    session_key_prefix: str = ""
    mode: SessionMode | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    parent_session_id: str = ""
    include_children: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ListCursor:
    """Position after the last session of a page (ordering: update_time desc, session_id asc)."""

    update_time: datetime
    session_id: str


@dataclass(kw_only=True)
class WriteBatch:
    """Everything one step of a session commits atomically.

    `session` is the new record; its `version` must be exactly one more than the stored one (CAS).
    History messages are appended at `history_base` (the index of the first), or replace the whole
    history when `replace_history` is set.
    """

    tenant: str
    session_id: str
    session: SessionRecord | None = None
    events: list[SequencedEvent] = field(default_factory=list)
    transcript: list[TranscriptEntry] = field(default_factory=list)
    history: list[HistoryMessage] = field(default_factory=list)
    history_base: int = 0
    replace_history: bool = False
    clear_transcript: bool = False
    runs: list[RunRecord] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    idempotency: IdempotencyRecord | None = None
    # Hook registrations of this session as (plugin_id, registration JSON), stored (or replaced) with the step.
    hook_registrations: list[tuple[str, str]] = field(default_factory=list)


class SessionStore(CheckpointStore, Protocol):
    """Durable sessions, model history, transcript, event log, runs, idempotency keys and file checkpoints
    (the methods of CheckpointStore), all scoped by tenant."""

    async def open(self) -> None:
        """Creates or migrates the schema."""
        ...

    async def close(self) -> None:
        """Flushes pending writes and closes."""
        ...

    async def create_session(self, record: SessionRecord, *, batch: WriteBatch | None = None) -> None:
        """Inserts a new session (and an optional first batch, e.g. an idempotency record) atomically.
        Raises SessionExistsError when the id is taken for the tenant."""
        ...

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord | None: ...

    async def list_sessions(
        self, tenant: str, query: SessionQuery, *, after: ListCursor | None, limit: int
    ) -> list[SessionRecord]:
        """Sessions matching the query, update_time desc then session_id, strictly after the cursor."""
        ...

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        """Removes the session and everything it owns (checkpoints included); False when it did not exist."""
        ...

    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        """Commits a batch. With durable=True returns once committed (raising on failure, including
        VersionConflictError); with durable=False the write is queued and committed with the next
        group (used for deltas)."""
        ...

    async def flush(self) -> None:
        """Returns once every write queued before the call is committed."""
        ...

    async def load_history(self, tenant: str, session_id: str) -> list[HistoryMessage]: ...

    async def load_history_sized(self, tenant: str, session_id: str) -> tuple[list[HistoryMessage], int]:
        """The history and its size as stored (characters of its serialised messages), which sizes the
        session in the idle-session cache without walking the messages."""
        ...

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]: ...

    async def count_transcript(self, tenant: str, session_id: str) -> int: ...

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]: ...

    async def purge_events(self, tenant: str, session_id: str, *, keep_last: int, older_than: datetime) -> None:
        """Retention: drops events beyond the newest `keep_last` and those created before `older_than`
        (the newest event is always kept, so a session's numbering stays discoverable)."""
        ...

    async def oldest_event_sequence(self, tenant: str, session_id: str) -> int | None: ...

    async def get_run(self, tenant: str, session_id: str, run_id: str) -> RunRecord | None: ...

    async def find_run_by_request_id(self, tenant: str, session_id: str, request_id: str) -> RunRecord | None: ...

    async def list_tool_calls(self, tenant: str, session_id: str, run_id: str) -> list[ToolCallRecord]:
        """A run's tool calls ordered by round, then position."""
        ...

    async def get_tool_call(self, tenant: str, session_id: str, call_id: str) -> ToolCallRecord | None: ...

    async def list_pending_hosted_calls(self) -> list[ToolCallRecord]:
        """Pending hosted calls of all tenants (deadlines are re-armed at start-up)."""
        ...

    async def list_runs(self, tenant: str, session_id: str) -> list[RunRecord]:
        """A session's runs in start order."""
        ...

    async def list_unfinished_runs(self) -> list[RunRecord]:
        """Runs (all tenants) whose status is not FINISHED, for start-up recovery."""
        ...

    async def put_hook_registration(self, tenant: str, session_id: str, plugin_id: str, registration_json: str) -> None:
        """Stores (or replaces) a registration document."""
        ...

    async def delete_hook_registration(self, tenant: str, session_id: str, plugin_id: str) -> bool: ...

    async def list_hook_registrations(self) -> list[tuple[str, str, str, str]]:
        """Every registration: (tenant, session_id, plugin_id, registration_json)."""
        ...

    async def get_idempotency(self, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None: ...

    async def put_idempotency(self, record: IdempotencyRecord) -> None: ...

    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        """Takes or renews the session lease; False while another owner holds an unexpired one."""
        ...

    async def release_lease(self, tenant: str, session_id: str, owner: str) -> None: ...

    async def notify(self, tenant: str, session_id: str, sequence: int) -> None:
        """Tells other replicas that events up to `sequence` are committed (no-op for one process)."""
        ...


def session_ids(records: Sequence[SessionRecord]) -> list[str]:
    """Convenience for tests and logs."""
    return [r.session_id for r in records]
