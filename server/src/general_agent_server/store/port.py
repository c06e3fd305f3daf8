"""The SessionStore port: small protocols, one per concern, and `SessionStore`, which combines them.

A store keeps everything scoped by tenant: a read in one tenant never sees another's rows, and the same
session id in two tenants names two independent sessions. The store is built for several replicas: every
state write is a compare-and-set on the session `version`, the replica serving a session holds its lease,
and `notify` plus the wake-up seam (`Wakeups`, store/wakeups.py) are how another replica learns of a commit at
once (PostgreSQL's LISTEN/NOTIFY; within one process, in-process wake-ups; polling stays the fallback).

Implementations: `store.sqlite.SqliteSessionStore` (the server's) and `store.memory.InMemorySessionStore`
(for in-process tests). Both pass the conformance suite in `store.testing`, and so must any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import IdempotencyRecord, RunRecord, ToolCallRecord
from general_agent_server.domain.session import SessionMode, SessionRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.wakeups import Wakeups
from general_agent_server.workspace.checkpoints.recorder import CheckpointStore

__all__ = [
    "BatchWriter",
    "CheckpointStore",
    "HookRegistrationStore",
    "IdempotencyStore",
    "LeaseStore",
    "ListCursor",
    "RunStore",
    "SessionExistsError",
    "SessionLogReader",
    "SessionQuery",
    "SessionRecordStore",
    "SessionStore",
    "StoreError",
    "StoreLifecycle",
    "StoreUnavailableError",
    "VersionConflictError",
    "Wakeups",
    "WriteBatch",
    "session_ids",
]


class StoreError(Exception):
    """The store failed; callers report INTERNAL."""


class StoreUnavailableError(StoreError, ServiceError):
    """The store cannot take a write for now: its disk is full (RESOURCE_EXHAUSTED), or another process held
    its write lock past the busy timeout (UNAVAILABLE). Nothing of the write was committed; the same write may
    succeed later, so callers are told to retry (RetryInfo) instead of INTERNAL."""

    @classmethod
    def disk_full(cls) -> StoreUnavailableError:
        return cls._of(ErrorCode.RESOURCE_EXHAUSTED, "is out of disk space", "store_disk")

    @classmethod
    def locked(cls) -> StoreUnavailableError:
        return cls._of(ErrorCode.UNAVAILABLE, "is locked by another process", "store_lock")

    @classmethod
    def _of(cls, code: ErrorCode, what: str, resource: str) -> StoreUnavailableError:
        message = f"the server's store {what}; nothing was written, retry later"
        return cls(code, "RESOURCE_LIMIT", message, metadata={"resource": resource}, retry_after_seconds=1.0)


class SessionExistsError(StoreError):
    """create_session found the id taken."""


class VersionConflictError(StoreError):
    """A compare-and-set write found another version than expected (or no session at all)."""


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
    """Everything one step of a session commits atomically: all of it lands, or none of it does.

    `session` is the new record; its `version` must be exactly one more than the stored one (CAS).
    History messages are written at `history_base` (the index of the first, replacing any message already
    at an index), or replace the whole history when `replace_history` is set. `clear_transcript` empties
    the transcript before the batch's entries are appended. Runs, tool calls, the idempotency record and
    hook registrations are stored or replaced by their keys. Rows are keyed by the batch's tenant and
    session id (runs and tool calls by their own), whether or not the session exists.
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
    # The owner whose session lease the batch frees (when its run ends or suspends), in the same transaction,
    # so no replica ever sees the run over while the lease still holds. Another owner's lease is left alone.
    release_lease: str = ""
    # The owner that takes the session's lease with the batch, for `lease_ttl_seconds` (a run starting): with
    # `session` set, the batch commits only while no other owner holds a live lease, or raises
    # VersionConflictError as a stale version does, writing nothing. One transaction instead of a lease write
    # followed by the step's own.
    take_lease: str = ""
    lease_ttl_seconds: float = 0.0
    # Set by a writer that knows `session.config` is the config stored with the previous version (the same
    # object it committed or read): a durable store may leave the config's row as it is instead of encoding
    # and comparing it. A step whose compare-and-set fails writes nothing either way.
    config_unchanged: bool = False


class StoreLifecycle(Protocol):
    """Opening and closing. Reads and writes raise StoreError before `open` and after `close`."""

    async def open(self) -> None:
        """Creates or migrates the schema; raises StoreError for data this code cannot read."""
        ...

    async def close(self) -> None:
        """Commits every write queued before the call, then releases the store."""
        ...


class SessionRecordStore(Protocol):
    """Session records: create, get, page through and delete.

    Pages order by update_time descending, then session_id ascending (at microsecond precision), and a
    cursor is strictly exclusive, so paging with the last record of each page yields every session exactly
    once. Filters: the key prefix is literal (no pattern characters), every label must match, children
    (sessions with a parent) are listed only with `include_children` or when their parent is named."""

    async def create_session(self, record: SessionRecord, *, batch: WriteBatch | None = None) -> None:
        """Inserts a new session and an optional first batch (e.g. an idempotency record) atomically.
        Raises SessionExistsError, storing nothing of the batch, when the id is taken in the tenant."""
        ...

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord | None: ...

    async def list_sessions(
        self, tenant: str, query: SessionQuery, *, after: ListCursor | None, limit: int
    ) -> list[SessionRecord]:
        """At most `limit` sessions matching the query, strictly after the cursor."""
        ...

    async def count_sessions(self, tenant: str) -> int:
        """The tenant's sessions, children included, read in constant time whatever their number (the
        per-tenant bound asks on every create)."""
        ...

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        """Removes the session and everything it owns (history, transcript, events, runs, tool calls, hook
        registrations, checkpoints); False when it did not exist. Idempotency records stay."""
        ...


class BatchWriter(Protocol):
    """The write path: one WriteBatch per step of a session.

    A batch is atomic. With a `session` record it is a compare-and-set on the stored version (stored + 1);
    a mismatch, or no such session, raises VersionConflictError and writes nothing. Writes are applied in
    the order they were made, buffered or durable, and a failing batch fails alone: writes queued around it
    still land. A read that starts after a durable write (or a `flush`) returned sees that write and
    everything queued before it."""

    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        """With durable=True returns once committed, raising StoreError (VersionConflictError for a CAS
        mismatch) when the batch did not land. With durable=False the batch is queued and committed with
        the next group (used for deltas); its failure is logged, never raised."""
        ...

    async def flush(self) -> None:
        """Returns once every write queued before the call is committed."""
        ...


class SessionLogReader(Protocol):
    """Reads of what batches wrote: the model history, the transcript and the event log, plus event
    retention. Reads of an unknown session are empty, never an error."""

    async def load_history(self, tenant: str, session_id: str) -> list[HistoryMessage]:
        """The whole history in index order."""
        ...

    async def load_history_sized(self, tenant: str, session_id: str) -> tuple[list[HistoryMessage], int]:
        """The history and its size as stored (characters of its serialised messages), which sizes the
        session in the idle-session cache without walking the messages."""
        ...

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]:
        """Entries in write order, strictly after `after_entry_id`. The store assigns entry ids: positive,
        increasing in write order and never reused (not even after `clear_transcript`), so a page position
        never skips or repeats an entry."""
        ...

    async def count_transcript(self, tenant: str, session_id: str) -> int: ...

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]:
        """Events in sequence order, strictly after `after_sequence` (sequences may have gaps)."""
        ...

    async def purge_events(self, tenant: str, session_id: str, *, keep_last: int, older_than: datetime) -> None:
        """Retention: drops events beyond the newest `keep_last` and those created before `older_than`
        (the newest event is always kept, so a session's numbering stays discoverable)."""
        ...

    async def oldest_event_sequence(self, tenant: str, session_id: str) -> int | None:
        """The lowest stored sequence, None when the session has no events."""
        ...

    async def newest_event_sequences(self, sessions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The highest stored sequence of each (tenant, session_id) given, in one read however many there are;
        a session without events is left out. Followers of many sessions ask this instead of reading each
        session's log (sessions/remote_tail.py)."""
        ...


class RunStore(Protocol):
    """Runs and their tool calls, written through WriteBatch and read here."""

    async def get_run(self, tenant: str, session_id: str, run_id: str) -> RunRecord | None: ...

    async def find_run_by_request_id(self, tenant: str, session_id: str, request_id: str) -> RunRecord | None:
        """The run a turn's request_id started (for replaying a retried turn)."""
        ...

    async def list_runs(self, tenant: str, session_id: str) -> list[RunRecord]:
        """A session's runs in start order (first_sequence)."""
        ...

    async def list_unfinished_runs(self) -> list[RunRecord]:
        """Runs (all tenants) whose status is not FINISHED, for start-up recovery."""
        ...

    async def list_tool_calls(self, tenant: str, session_id: str, run_id: str) -> list[ToolCallRecord]:
        """A run's tool calls ordered by round, then position."""
        ...

    async def get_tool_call(self, tenant: str, session_id: str, call_id: str) -> ToolCallRecord | None: ...

    async def list_waiting_calls(self) -> list[ToolCallRecord]:
        """Calls waiting for a host or a person, of all tenants: pending hosted calls and calls awaiting
        approval (their sessions are loaded and their deadlines re-armed at start-up), ordered by tenant,
        session, round and position."""
        ...


class HookRegistrationStore(Protocol):
    """Remote hook registrations as JSON documents, tenant-wide (session_id "") or per session, kept
    across restarts. Put and delete are ordered with batches."""

    async def put_hook_registration(self, tenant: str, session_id: str, plugin_id: str, registration_json: str) -> None:
        """Stores (or replaces) a registration document."""
        ...

    async def delete_hook_registration(self, tenant: str, session_id: str, plugin_id: str) -> bool:
        """False when there was nothing to delete."""
        ...

    async def list_hook_registrations(self, scope: tuple[str, str] | None = None) -> list[tuple[str, str, str, str]]:
        """Every registration, or those of one `scope` (tenant, session_id; "" for the tenant's own), as
        (tenant, session_id, plugin_id, registration_json), in that order."""
        ...


class IdempotencyStore(Protocol):
    """Idempotency keys: the first result of a request_id, per tenant and RPC. Put replaces, so the
    caller decides what a repeated key means (docs/protocol.md, "Idempotency")."""

    async def get_idempotency(self, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None: ...

    async def put_idempotency(self, record: IdempotencyRecord) -> None:
        """Durable when it returns (the same as a batch holding only the record)."""
        ...


class LeaseStore(Protocol):
    """Which replica serves a session, and the seam that tells others about new events.

    A lease belongs to one owner until it expires `ttl_seconds` after it was last taken or renewed. Leases
    live beside the session record: they never change it (nor its version), and a session that does not
    exist cannot be leased."""

    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        """Takes or renews the session lease; False while another owner holds an unexpired one."""
        ...

    async def take_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> int | None:
        """`acquire_lease` that reads the session's version in the same write: the version when the lease is
        taken or renewed, None while another owner holds an unexpired one (a run starting reads no row more)."""
        ...

    async def renew_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        """Extends the lease only while `owner` holds it (an expired one too, if nobody has taken it since);
        False when it is free or another owner's. Unlike `acquire_lease` it never takes a free lease, so a renewal
        that lands after the lease was released leaves it free."""
        ...

    async def release_lease(self, tenant: str, session_id: str, owner: str) -> None:
        """Frees the lease if `owner` holds it; does nothing otherwise."""
        ...

    async def notify(self, tenant: str, session_id: str, sequence: int) -> None:
        """Tells every replica's waiters (Wakeups) that events up to `sequence` are committed. Stores also do this
        by themselves for every batch with events, so a caller needs it only for commits they cannot see."""
        ...


class CommandStatus(StrEnum):
    PENDING = "PENDING"
    CLAIMED = "CLAIMED"
    DONE = "DONE"


@dataclass(frozen=True, kw_only=True)
class SessionCommand:
    """A command for a session whose run another replica executes, on its way to that replica and back."""

    tenant: str
    session_id: str
    command_id: str
    body_json: str
    status: CommandStatus = CommandStatus.PENDING
    result_json: str = ""


class CommandStore(Protocol):
    """Commands relayed through the store to the replica that holds a session's lease (sessions/relay.py).

    A command is PENDING until the lease holder claims it (CLAIMED) and answers it (DONE); the sender reads the
    answer and deletes the row. A PENDING command can be withdrawn (its sender applies it itself: the run
    ended or its owner died); a claimed one cannot. Commands are deleted with their session."""

    async def put_command(self, command: SessionCommand) -> None: ...

    async def claim_commands(self, owner: str) -> list[SessionCommand]:
        """The PENDING commands of the sessions whose unexpired lease `owner` holds, now CLAIMED."""
        ...

    async def finish_command(self, tenant: str, command_id: str, result_json: str) -> None: ...

    async def get_command(self, tenant: str, command_id: str) -> SessionCommand | None: ...

    async def withdraw_command(self, tenant: str, command_id: str) -> bool:
        """Deletes the command if it is still PENDING; False once it was claimed (or is gone)."""
        ...

    async def delete_command(self, tenant: str, command_id: str) -> None: ...

    async def lease_holder(self, tenant: str, session_id: str) -> str:
        """The owner of the session's unexpired lease; "" when nobody holds one."""
        ...

    async def purge_commands(self, *, older_than: datetime) -> int:
        """Deletes, of all tenants, the CLAIMED and DONE commands created before `older_than` (their sender is
        gone: a live one deletes the answer it reads) and every command whose session no longer exists; the
        number deleted. PENDING commands of live sessions stay (their sender withdraws them)."""
        ...


class SessionStore(
    StoreLifecycle,
    SessionRecordStore,
    BatchWriter,
    SessionLogReader,
    RunStore,
    HookRegistrationStore,
    IdempotencyStore,
    LeaseStore,
    CommandStore,
    CheckpointStore,
    Wakeups,
    Protocol,
):
    """Everything the server keeps: every protocol above, CheckpointStore (file checkpoints) and Wakeups. A caller
    that needs one concern should depend on that protocol alone."""


def session_ids(records: Sequence[SessionRecord]) -> list[str]:
    """Convenience for tests and logs."""
    return [r.session_id for r in records]
