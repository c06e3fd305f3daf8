"""The tables of InMemorySessionStore (store/memory.py) and the rules that change them.

`check` raises for everything that would make a batch fail (a compare-and-set mismatch, an event sequence
already taken) before `apply` changes anything: that split is what makes a batch atomic here. Entry ids and
checkpoint positions come from counters that never go back, as SQLite's AUTOINCREMENT does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import IdempotencyRecord, RunRecord, ToolCallRecord
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.port import (
    ListCursor,
    SessionCommand,
    SessionQuery,
    StoreError,
    VersionConflictError,
    WriteBatch,
)
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, beyond_bounds

Key = tuple[str, str]  # (tenant, session_id)


@dataclass
class SessionRow:
    record: SessionRecord
    lease_owner: str = ""
    lease_expires: float = 0.0


@dataclass
class Tables:
    sessions: dict[Key, SessionRow] = field(default_factory=dict)
    # Sessions per tenant, kept as the SQL stores' triggers keep theirs.
    session_counts: Counter[str] = field(default_factory=Counter)
    history: dict[Key, dict[int, HistoryMessage]] = field(default_factory=dict)
    transcript: dict[Key, list[TranscriptEntry]] = field(default_factory=dict)
    events: dict[Key, dict[int, SequencedEvent]] = field(default_factory=dict)
    runs: dict[Key, dict[str, RunRecord]] = field(default_factory=dict)
    tool_calls: dict[Key, dict[str, ToolCallRecord]] = field(default_factory=dict)
    checkpoints: dict[Key, dict[int, Checkpoint]] = field(default_factory=dict)
    idempotency: dict[tuple[str, str, str], IdempotencyRecord] = field(default_factory=dict)
    hooks: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (tenant, session, plugin) -> JSON
    commands: dict[tuple[str, str], SessionCommand] = field(default_factory=dict)  # (tenant, command id)
    last_entry_id: int = 0
    last_position: int = 0

    # ------------------------------------------------------------------ batches
    def check(self, batch: WriteBatch, *, creating: SessionRecord | None = None, now: float = 0.0) -> None:
        """Raises what writing `batch` would raise; `creating` is a session inserted with it; `now` is the store's
        clock (leases)."""
        if batch.session is not None:
            record = batch.session
            key = (record.tenant, record.session_id)
            row = self.sessions.get(key)
            stored = creating if creating is not None and key == (creating.tenant, creating.session_id) else None
            stored = stored or (row.record if row else None)
            expected = record.version - 1
            if stored is None or stored.version != expected:
                raise VersionConflictError(f"session {record.session_id!r}: expected stored version {expected}")
            if (
                batch.take_lease
                and row is not None
                and row.lease_owner not in ("", batch.take_lease)
                and row.lease_expires >= now
            ):
                raise VersionConflictError(f"session {record.session_id!r}: another owner holds its lease")
        taken = set(self.events.get((batch.tenant, batch.session_id), {}))
        for event in batch.events:
            if event.sequence in taken:
                raise StoreError(f"event sequence {event.sequence} of session {batch.session_id!r} is taken")
            taken.add(event.sequence)

    def apply(self, batch: WriteBatch, *, now: float = 0.0) -> None:
        """Writes a checked batch."""
        key = (batch.tenant, batch.session_id)
        if batch.session is not None:
            self.sessions[(batch.session.tenant, batch.session.session_id)].record = batch.session
        row = self.sessions.get(key)
        if batch.take_lease and batch.session is not None and row is not None:
            row.lease_owner, row.lease_expires = batch.take_lease, now + batch.lease_ttl_seconds
        if batch.release_lease and row is not None and row.lease_owner == batch.release_lease:
            row.lease_owner, row.lease_expires = "", 0.0
        if batch.replace_history:
            self.history.pop(key, None)
        for i, message in enumerate(batch.history):
            self.history.setdefault(key, {})[batch.history_base + i] = message
        if batch.clear_transcript:
            self.transcript.pop(key, None)
        for entry in batch.transcript:
            self.last_entry_id += 1
            self.transcript.setdefault(key, []).append(replace(entry, entry_id=self.last_entry_id))
        for event in batch.events:
            self.events.setdefault(key, {})[event.sequence] = replace(event, session_id=batch.session_id)
        for run in batch.runs:
            self.runs.setdefault((run.tenant, run.session_id), {})[run.run_id] = run
        for call in batch.tool_calls:
            self.tool_calls.setdefault((call.tenant, call.session_id), {})[call.call_id] = call
        if batch.idempotency is not None:
            idem = batch.idempotency
            self.idempotency[(idem.tenant, idem.rpc, idem.request_id)] = idem
        for plugin_id, registration_json in batch.hook_registrations:
            self.hooks[(*key, plugin_id)] = registration_json

    # ------------------------------------------------------------------ sessions
    def insert_session(self, record: SessionRecord) -> None:
        self.sessions[(record.tenant, record.session_id)] = SessionRow(record)
        self.session_counts[record.tenant] += 1

    def delete_session(self, key: Key) -> bool:
        existed = self.sessions.pop(key, None) is not None
        if existed:
            self.session_counts[key[0]] -= 1
        for table in (self.history, self.transcript, self.events, self.runs, self.tool_calls, self.checkpoints):
            table.pop(key, None)
        for hook_key in [k for k in self.hooks if k[:2] == key]:
            del self.hooks[hook_key]
        for command_key in [k for k, c in self.commands.items() if (c.tenant, c.session_id) == key]:
            del self.commands[command_key]
        return existed

    # ------------------------------------------------------------------ events
    def purge_events(self, key: Key, *, keep_last: int, older_than: datetime) -> None:
        events = self.events.get(key)
        if not events:
            return
        newest_first = sorted(events, reverse=True)
        floor = newest_first[keep_last - 1] if len(newest_first) >= keep_last else 0
        for sequence in newest_first[1:]:
            if sequence < floor or events[sequence].create_time < older_than:
                del events[sequence]

    # ------------------------------------------------------------------ checkpoints
    def add_checkpoint(self, key: Key, checkpoint: Checkpoint, *, max_count: int, max_bytes: int) -> list[str]:
        """Stores the checkpoint as the newest, then drops the oldest (the new one last) until within bounds."""
        if key not in self.sessions:
            return []
        stored = self.checkpoints.setdefault(key, {})
        if any(c.checkpoint_id == checkpoint.checkpoint_id for c in stored.values()):
            raise StoreError(f"checkpoint {checkpoint.checkpoint_id!r} exists")
        self.last_position += 1
        stored[self.last_position] = checkpoint
        sizes = [(stored[p].checkpoint_id, stored[p].stored_bytes) for p in sorted(stored)]
        dropped = beyond_bounds(sizes, max_count=max_count, max_bytes=max_bytes)
        self.delete_checkpoints(key, dropped)
        return dropped

    def delete_checkpoints(self, key: Key, checkpoint_ids: Sequence[str]) -> None:
        stored = self.checkpoints.get(key, {})
        for position in [p for p, c in stored.items() if c.checkpoint_id in checkpoint_ids]:
            del stored[position]


def session_matches(record: SessionRecord, query: SessionQuery, after: ListCursor | None) -> bool:
    """Whether ListSessions shows `record` for the query, on a page strictly after `after`."""
    identity = record.identity
    if query.session_key_prefix and not identity.session_key.startswith(query.session_key_prefix):
        return False
    if query.mode is not None and identity.mode is not query.mode:
        return False
    if query.parent_session_id:
        if record.parent_session_id != query.parent_session_id:
            return False
    elif record.parent_session_id and not query.include_children:
        return False
    labels = record.config.labels
    if any(key not in labels or labels[key] != value for key, value in query.labels.items()):
        return False
    if after is None:
        return True
    return record.update_time < after.update_time or (
        record.update_time == after.update_time and record.session_id > after.session_id
    )
