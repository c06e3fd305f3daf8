"""An in-memory SessionStore for fast in-process tests: the same contract as the SQLite store (it passes the
same conformance suite in `store.testing`), no file, no threads.

Every write is applied when it is made, in call order, and checked whole before anything changes, so a
batch is atomic. Records are copied in and out, so a caller that mutates what it wrote or read cannot
change the stored state (as with a real database). Each call yields to the event loop once, as a real
store's I/O does, so code that wrongly relies on a store call not interleaving with other tasks shows up
here too. Leases read `clock` (monotonic seconds), which a test may replace to expire leases without
sleeping. Data outlives `close`: opening the same object again finds it."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

from general_agent_server.domain import codec
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import (
    CallKind,
    CallStatus,
    IdempotencyRecord,
    RunRecord,
    RunStatus,
    ToolCallRecord,
)
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.memory_tables import Key, Tables, session_matches
from general_agent_server.store.port import (
    CommandStatus,
    ListCursor,
    SessionCommand,
    SessionExistsError,
    SessionQuery,
    StoreError,
    WriteBatch,
)
from general_agent_server.store.wakeups import Subscription, WakeupHub, answer_topic, commands_topic, events_topic
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointInfo

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _copy(value: T) -> T:
    return copy.deepcopy(value)


class InMemorySessionStore:
    """SessionStore in process memory (see module docstring)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._t = Tables()
        self._open = False
        # One process: a commit wakes this store's own waiters (store/wakeups.py).
        self.wakeups = WakeupHub()
        self._command_times: dict[Key, datetime] = {}

    # ------------------------------------------------------------------ life cycle
    async def open(self) -> None:
        self._open = True
        await asyncio.sleep(0)

    async def close(self) -> None:
        self._open = False
        await asyncio.sleep(0)

    def _tables(self) -> Tables:
        if not self._open:
            raise StoreError("store is not open")
        return self._t

    async def _read(self, value: T) -> T:
        """A copy of `value`, returned after one turn of the event loop."""
        result = _copy(value)
        await asyncio.sleep(0)
        return result

    # ------------------------------------------------------------------ writes
    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        tables = self._tables()
        now = self.clock()
        try:
            tables.check(batch, now=now)
        except StoreError as exc:
            if durable:
                raise
            logger.error("buffered write failed: %s", exc, extra={"category": "system"})
        else:
            tables.apply(_copy(batch), now=now)
            if batch.events:
                self.wakeups.wake(events_topic(batch.tenant, batch.session_id))
        await asyncio.sleep(0)

    async def flush(self) -> None:
        self._tables()
        await asyncio.sleep(0)

    # ------------------------------------------------------------------ sessions
    async def create_session(self, record: SessionRecord, *, batch: WriteBatch | None = None) -> None:
        tables = self._tables()
        key = (record.tenant, record.session_id)
        if key in tables.sessions:
            raise SessionExistsError(f"session {record.session_id!r} already exists")
        first = batch or WriteBatch(tenant=record.tenant, session_id=record.session_id)
        tables.check(first, creating=record)
        tables.insert_session(_copy(record))
        tables.apply(_copy(first))
        await asyncio.sleep(0)

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord | None:
        row = self._tables().sessions.get((tenant, session_id))
        return await self._read(row.record if row else None)

    async def list_sessions(
        self, tenant: str, query: SessionQuery, *, after: ListCursor | None, limit: int
    ) -> list[SessionRecord]:
        found = [
            row.record
            for (t, _), row in self._tables().sessions.items()
            if t == tenant and session_matches(row.record, query, after)
        ]
        found.sort(key=lambda r: r.session_id)
        found.sort(key=lambda r: r.update_time, reverse=True)
        return await self._read(found[:limit])

    async def count_sessions(self, tenant: str) -> int:
        """The tenant's sessions (tenants/quota.py)."""
        return await self._read(self._tables().session_counts[tenant])

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        deleted = self._tables().delete_session((tenant, session_id))
        await asyncio.sleep(0)
        return deleted

    # ------------------------------------------------------------------ history, transcript, events
    async def load_history(self, tenant: str, session_id: str) -> list[HistoryMessage]:
        messages = self._tables().history.get((tenant, session_id), {})
        return await self._read([messages[i] for i in sorted(messages)])

    async def load_history_sized(self, tenant: str, session_id: str) -> tuple[list[HistoryMessage], int]:
        messages = await self.load_history(tenant, session_id)
        return messages, sum(len(codec.HISTORY_MESSAGE.dumps(m)) for m in messages)

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]:
        entries = self._tables().transcript.get((tenant, session_id), [])
        return await self._read([e for e in entries if e.entry_id > after_entry_id][:limit])

    async def count_transcript(self, tenant: str, session_id: str) -> int:
        return await self._read(len(self._tables().transcript.get((tenant, session_id), [])))

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]:
        events = self._tables().events.get((tenant, session_id), {})
        return await self._read([events[s] for s in sorted(events) if s > after_sequence][:limit])

    async def purge_events(self, tenant: str, session_id: str, *, keep_last: int, older_than: datetime) -> None:
        self._tables().purge_events((tenant, session_id), keep_last=max(1, keep_last), older_than=older_than)
        await asyncio.sleep(0)

    async def oldest_event_sequence(self, tenant: str, session_id: str) -> int | None:
        events = self._tables().events.get((tenant, session_id), {})
        return await self._read(min(events) if events else None)

    async def newest_event_sequences(self, sessions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        tables = self._tables()
        newest = {key: max(events) for key in sessions if (events := tables.events.get(key))}
        return await self._read(newest)

    # ------------------------------------------------------------------ runs and tool calls
    def _runs(self, key: Key) -> list[RunRecord]:
        runs = self._tables().runs.get(key, {})
        return [runs[run_id] for run_id in sorted(runs)]

    async def get_run(self, tenant: str, session_id: str, run_id: str) -> RunRecord | None:
        return await self._read(self._tables().runs.get((tenant, session_id), {}).get(run_id))

    async def find_run_by_request_id(self, tenant: str, session_id: str, request_id: str) -> RunRecord | None:
        found = [r for r in self._runs((tenant, session_id)) if r.request_id == request_id]
        return await self._read(found[0] if found else None)

    async def list_runs(self, tenant: str, session_id: str) -> list[RunRecord]:
        return await self._read(sorted(self._runs((tenant, session_id)), key=lambda r: r.first_sequence))

    async def list_unfinished_runs(self) -> list[RunRecord]:
        runs = [r for key in sorted(self._tables().runs) for r in self._runs(key)]
        return await self._read([r for r in runs if r.status is not RunStatus.FINISHED])

    async def list_tool_calls(self, tenant: str, session_id: str, run_id: str) -> list[ToolCallRecord]:
        calls = self._tables().tool_calls.get((tenant, session_id), {}).values()
        found = sorted((c for c in calls if c.run_id == run_id), key=lambda c: (c.round_index, c.position))
        return await self._read(found)

    async def get_tool_call(self, tenant: str, session_id: str, call_id: str) -> ToolCallRecord | None:
        return await self._read(self._tables().tool_calls.get((tenant, session_id), {}).get(call_id))

    async def list_waiting_calls(self) -> list[ToolCallRecord]:
        found = [
            c
            for calls in self._tables().tool_calls.values()
            for c in calls.values()
            if (c.status is CallStatus.PENDING and c.kind is CallKind.HOSTED)
            or c.status is CallStatus.AWAITING_APPROVAL
        ]
        found.sort(key=lambda c: (c.tenant, c.session_id, c.round_index, c.position))
        return await self._read(found)

    # ------------------------------------------------------------------ checkpoints
    async def add_checkpoint(
        self, tenant: str, session_id: str, checkpoint: Checkpoint, *, max_count: int, max_bytes: int
    ) -> list[str]:
        dropped = self._tables().add_checkpoint(
            (tenant, session_id), _copy(checkpoint), max_count=max_count, max_bytes=max_bytes
        )
        await asyncio.sleep(0)
        return dropped

    async def list_checkpoints(
        self, tenant: str, session_id: str, *, before_position: int = 0, limit: int
    ) -> list[CheckpointInfo]:
        stored = self._tables().checkpoints.get((tenant, session_id), {})
        positions = sorted((p for p in stored if before_position == 0 or p < before_position), reverse=True)
        return await self._read([stored[p].listed(p) for p in positions[:limit]])

    async def load_checkpoints_down_to(self, tenant: str, session_id: str, checkpoint_id: str) -> list[Checkpoint]:
        stored = self._tables().checkpoints.get((tenant, session_id), {})
        floor = next((p for p, c in stored.items() if c.checkpoint_id == checkpoint_id), None)
        if floor is None:
            return await self._read([])
        return await self._read([stored[p] for p in sorted(stored, reverse=True) if p >= floor])

    async def delete_checkpoints(self, tenant: str, session_id: str, checkpoint_ids: Sequence[str]) -> None:
        self._tables().delete_checkpoints((tenant, session_id), checkpoint_ids)
        await asyncio.sleep(0)

    # ------------------------------------------------------------------ hook registrations
    async def put_hook_registration(self, tenant: str, session_id: str, plugin_id: str, registration_json: str) -> None:
        self._tables().hooks[(tenant, session_id, plugin_id)] = registration_json
        await asyncio.sleep(0)

    async def delete_hook_registration(self, tenant: str, session_id: str, plugin_id: str) -> bool:
        removed = self._tables().hooks.pop((tenant, session_id, plugin_id), None)
        await asyncio.sleep(0)
        return removed is not None

    async def list_hook_registrations(self, scope: tuple[str, str] | None = None) -> list[tuple[str, str, str, str]]:
        hooks = self._tables().hooks
        keys = sorted(k for k in hooks if scope is None or k[:2] == scope)
        return await self._read([(*key, hooks[key]) for key in keys])

    # ------------------------------------------------------------------ idempotency
    async def get_idempotency(self, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None:
        return await self._read(self._tables().idempotency.get((tenant, rpc, request_id)))

    async def put_idempotency(self, record: IdempotencyRecord) -> None:
        await self.write(WriteBatch(tenant=record.tenant, session_id="", idempotency=record))

    # ------------------------------------------------------------------ leases
    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        return await self.take_lease(tenant, session_id, owner, ttl_seconds=ttl_seconds) is not None

    async def take_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> int | None:
        row = self._tables().sessions.get((tenant, session_id))
        now = self.clock()
        version: int | None = None
        if row is not None and (row.lease_owner in ("", owner) or row.lease_expires < now):
            row.lease_owner, row.lease_expires = owner, now + ttl_seconds
            version = row.record.version
        await asyncio.sleep(0)
        return version

    async def renew_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        row = self._tables().sessions.get((tenant, session_id))
        held = False
        if row is not None and row.lease_owner == owner:
            row.lease_expires, held = self.clock() + ttl_seconds, True
        await asyncio.sleep(0)
        return held

    async def release_lease(self, tenant: str, session_id: str, owner: str) -> None:
        row = self._tables().sessions.get((tenant, session_id))
        if row is not None and row.lease_owner == owner:
            row.lease_owner, row.lease_expires = "", 0.0
        await asyncio.sleep(0)

    async def notify(self, tenant: str, session_id: str, sequence: int) -> None:
        self.wakeups.wake(events_topic(tenant, session_id))
        await asyncio.sleep(0)

    def subscribe(self, topic: str, on_wake: Callable[[], None] | None = None) -> Subscription:
        return self.wakeups.subscribe(topic, on_wake)

    # ------------------------------------------------------------------ relayed commands
    async def put_command(self, command: SessionCommand) -> None:
        self._tables().commands[(command.tenant, command.command_id)] = command
        self._command_times[(command.tenant, command.command_id)] = datetime.now(UTC)
        self.wakeups.wake(commands_topic())
        await asyncio.sleep(0)

    async def claim_commands(self, owner: str) -> list[SessionCommand]:
        tables, now = self._tables(), self.clock()
        claimed = []
        for key, command in list(tables.commands.items()):
            row = tables.sessions.get((command.tenant, command.session_id))
            held = row is not None and row.lease_owner == owner and row.lease_expires >= now
            if command.status is CommandStatus.PENDING and held:
                tables.commands[key] = replace(command, status=CommandStatus.CLAIMED)
                claimed.append(tables.commands[key])
        return await self._read(claimed)

    async def finish_command(self, tenant: str, command_id: str, result_json: str) -> None:
        commands = self._tables().commands
        if (command := commands.get((tenant, command_id))) is not None:
            commands[(tenant, command_id)] = replace(command, status=CommandStatus.DONE, result_json=result_json)
            self.wakeups.wake(answer_topic(tenant, command_id))
        await asyncio.sleep(0)

    async def get_command(self, tenant: str, command_id: str) -> SessionCommand | None:
        return await self._read(self._tables().commands.get((tenant, command_id)))

    async def withdraw_command(self, tenant: str, command_id: str) -> bool:
        commands = self._tables().commands
        command = commands.get((tenant, command_id))
        withdrawn = command is not None and command.status is CommandStatus.PENDING
        if withdrawn:
            del commands[(tenant, command_id)]
        return await self._read(withdrawn)

    async def delete_command(self, tenant: str, command_id: str) -> None:
        self._tables().commands.pop((tenant, command_id), None)
        await asyncio.sleep(0)

    async def purge_commands(self, *, older_than: datetime) -> int:
        tables, times = self._tables(), self._command_times
        gone = [
            key
            for key, c in tables.commands.items()
            if (c.tenant, c.session_id) not in tables.sessions
            or (c.status is not CommandStatus.PENDING and times.get(key, older_than) < older_than)
        ]
        for key in gone:
            del tables.commands[key]
            times.pop(key, None)
        return await self._read(len(gone))

    async def lease_holder(self, tenant: str, session_id: str) -> str:
        row = self._tables().sessions.get((tenant, session_id))
        live = row is not None and row.lease_owner and row.lease_expires >= self.clock()
        return await self._read(row.lease_owner if row is not None and live else "")
