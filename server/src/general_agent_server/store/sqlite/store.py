"""The default SessionStore: one SQLite file, WAL mode.

Writes go through the group-commit writer (writer.py). Reads use their own aiosqlite connection and see
committed data only; callers that must read their own buffered writes call `flush()` first."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite

from general_agent_server.domain import codec
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import IdempotencyRecord, RunRecord, RunStatus, ToolCallRecord
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.observability.port import Observer
from general_agent_server.store.port import ListCursor, SessionCommand, SessionQuery, StoreError, WriteBatch
from general_agent_server.store.rows import (
    EVENT_SELECT,
    IDEMPOTENCY_SELECT,
    SESSION_SELECT,
    TRANSCRIPT_SELECT,
    idempotency_record,
    record_from_row,
    sequenced_events,
    to_us,
    transcript_entries,
)
from general_agent_server.store.sqlite import checkpoints, commands
from general_agent_server.store.sqlite.checkpointer import CHECKPOINT_SECONDS, WalCheckpointer
from general_agent_server.store.sqlite.operations import (
    DeleteSession,
    HookRegistration,
    InsertSession,
    Lease,
    Operation,
    PurgeEvents,
)
from general_agent_server.store.sqlite.rows import fetch_all, list_sessions_query
from general_agent_server.store.sqlite.writer import GroupCommitWriter
from general_agent_server.store.wakeups import Subscription, WakeupHub, answer_topic, commands_topic, events_topic
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointInfo

DB_FILE_NAME = "general-agent.sqlite3"
# Sessions per newest_event_sequences query: 800 parameters, under the smallest limit SQLite builds use (999).
NEWEST_BATCH = 400


class SqliteSessionStore:
    """SessionStore on SQLite (see module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        flush_interval: float = 0.02,
        busy_timeout_ms: int = 5000,
        checkpoint_interval: float = CHECKPOINT_SECONDS,
    ) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._writer = GroupCommitWriter(path, flush_interval=flush_interval, busy_timeout_ms=busy_timeout_ms)
        self.checkpointer = WalCheckpointer(path, interval=checkpoint_interval, busy_timeout_ms=busy_timeout_ms)
        self._reader: aiosqlite.Connection | None = None
        self.wakeups = WakeupHub()

    @property
    def path(self) -> Path:
        return self._path

    # ------------------------------------------------------------------ life cycle
    async def open(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        # The file holds conversation content: owner-only, created so before SQLite opens it.
        fd = os.open(self._path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
        try:
            await self._writer.connect()
            self._reader = await aiosqlite.connect(self._path, isolation_level=None)
            await self._reader.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            await self.checkpointer.start()
        except BaseException:
            # A half-opened store must not keep its connection threads alive (the process would hang).
            await self._close_connections()
            raise
        self._writer.start()

    async def close(self) -> None:
        await self._writer.stop()
        await self._close_connections()
        self._writer.shutdown()

    async def _close_connections(self) -> None:
        await self.checkpointer.stop()
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
        await self._writer.disconnect()

    def _conn(self) -> aiosqlite.Connection:
        if self._reader is None:
            raise StoreError("store is not open")
        return self._reader

    async def _fetch_all(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[Any]:
        return await fetch_all(self._conn(), sql, params)

    async def _fetch_one(self, sql: str, params: tuple[Any, ...]) -> Any:
        rows = await fetch_all(self._conn(), sql, params)
        return rows[0] if rows else None

    async def _run_operation(self, tenant: str, session_id: str, operation: Operation) -> None:
        await self._writer.submit(WriteBatch(tenant=tenant, session_id=session_id), operation=operation)

    # ------------------------------------------------------------------ writes
    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        await self._writer.submit(batch, durable=durable)
        if batch.events:
            self.wakeups.wake(events_topic(batch.tenant, batch.session_id))

    async def flush(self) -> None:
        await self._writer.submit(WriteBatch(tenant="", session_id=""))

    # ------------------------------------------------------------------ sessions
    async def create_session(self, record: SessionRecord, *, batch: WriteBatch | None = None) -> None:
        create_batch = batch or WriteBatch(tenant=record.tenant, session_id=record.session_id)
        await self._writer.submit(create_batch, operation=InsertSession(record=record))

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord | None:
        row = await self._fetch_one(SESSION_SELECT + " WHERE tenant=? AND session_id=?", (tenant, session_id))
        return record_from_row(tuple(row)) if row else None

    async def list_sessions(
        self, tenant: str, query: SessionQuery, *, after: ListCursor | None, limit: int
    ) -> list[SessionRecord]:
        sql, params = list_sessions_query(tenant, query, after, limit)
        return [record_from_row(tuple(r)) for r in await self._fetch_all(sql, params)]

    def observe(self, observer: Observer) -> None:
        """Group commits are reported to `observer` (metrics, observability/port.py)."""
        self._writer.observer = observer

    async def count_sessions(self, tenant: str) -> int:
        """The tenant's sessions (tenants/quota.py), as the triggers of migration 7 keep them."""
        row = await self._fetch_one("SELECT sessions FROM session_counts WHERE tenant=?", (tenant,))
        return int(row[0]) if row else 0

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        marker = DeleteSession()
        await self._run_operation(tenant, session_id, marker)
        return marker.deleted

    # ------------------------------------------------------------------ history, transcript, events
    async def load_history(self, tenant: str, session_id: str) -> list[HistoryMessage]:
        messages, _ = await self.load_history_sized(tenant, session_id)
        return messages

    async def load_history_sized(self, tenant: str, session_id: str) -> tuple[list[HistoryMessage], int]:
        rows = await self._fetch_all(
            "SELECT message_json FROM history WHERE tenant=? AND session_id=? ORDER BY idx", (tenant, session_id)
        )
        return [codec.HISTORY_MESSAGE.loads(r[0]) for r in rows], sum(len(r[0]) for r in rows)

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]:
        found = await self._fetch_all(
            TRANSCRIPT_SELECT + " WHERE tenant=? AND session_id=? AND entry_id>? ORDER BY entry_id LIMIT ?",
            (tenant, session_id, after_entry_id, limit),
        )
        return transcript_entries(found)

    async def count_transcript(self, tenant: str, session_id: str) -> int:
        row = await self._fetch_one(
            "SELECT COUNT(*) FROM transcript WHERE tenant=? AND session_id=?", (tenant, session_id)
        )
        return int(row[0]) if row else 0

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]:
        found = await self._fetch_all(
            EVENT_SELECT + " WHERE tenant=? AND session_id=? AND sequence>? ORDER BY sequence LIMIT ?",
            (tenant, session_id, after_sequence, limit),
        )
        return sequenced_events(session_id, found)

    async def purge_events(self, tenant: str, session_id: str, *, keep_last: int, older_than: datetime) -> None:
        await self._run_operation(
            tenant, session_id, PurgeEvents(keep_last=max(1, keep_last), older_than_us=to_us(older_than))
        )

    async def oldest_event_sequence(self, tenant: str, session_id: str) -> int | None:
        row = await self._fetch_one(
            "SELECT MIN(sequence) FROM events WHERE tenant=? AND session_id=?", (tenant, session_id)
        )
        return int(row[0]) if row and row[0] is not None else None

    async def newest_event_sequences(self, sessions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        newest: dict[tuple[str, str], int] = {}
        keys = list(dict.fromkeys(sessions))
        for start in range(0, len(keys), NEWEST_BATCH):
            chunk = keys[start : start + NEWEST_BATCH]
            # One MAX per key, each answered from the end of the (tenant, session_id, sequence) key; only the
            # number of placeholders varies.
            keys_sql = ",".join(["(?,?)"] * len(chunk))
            sql = (
                f"WITH k(t, s) AS (VALUES {keys_sql}) "  # noqa: S608
                "SELECT t, s, (SELECT MAX(sequence) FROM events WHERE tenant=k.t AND session_id=k.s) FROM k"
            )
            rows = await self._fetch_all(sql, [part for key in chunk for part in key])
            newest.update(((t, s), int(m)) for t, s, m in rows if m is not None)
        return newest

    # ------------------------------------------------------------------ runs and tool calls
    async def get_run(self, tenant: str, session_id: str, run_id: str) -> RunRecord | None:
        row = await self._fetch_one(
            "SELECT record_json FROM runs WHERE tenant=? AND session_id=? AND run_id=?", (tenant, session_id, run_id)
        )
        return codec.RUN_RECORD.loads(row[0]) if row else None

    async def find_run_by_request_id(self, tenant: str, session_id: str, request_id: str) -> RunRecord | None:
        row = await self._fetch_one(
            "SELECT record_json FROM runs WHERE tenant=? AND session_id=? AND request_id=?",
            (tenant, session_id, request_id),
        )
        return codec.RUN_RECORD.loads(row[0]) if row else None

    async def list_runs(self, tenant: str, session_id: str) -> list[RunRecord]:
        rows = await self._fetch_all(
            "SELECT record_json FROM runs WHERE tenant=? AND session_id=?", (tenant, session_id)
        )
        return sorted((codec.RUN_RECORD.loads(r[0]) for r in rows), key=lambda r: r.first_sequence)

    async def list_unfinished_runs(self) -> list[RunRecord]:
        rows = await self._fetch_all("SELECT record_json FROM runs WHERE status != ?", (RunStatus.FINISHED.value,))
        return [codec.RUN_RECORD.loads(r[0]) for r in rows]

    async def list_tool_calls(self, tenant: str, session_id: str, run_id: str) -> list[ToolCallRecord]:
        rows = await self._fetch_all(
            "SELECT record_json FROM tool_calls WHERE tenant=? AND session_id=? AND run_id=?"
            " ORDER BY round_index, position",
            (tenant, session_id, run_id),
        )
        return [codec.TOOL_CALL.loads(r[0]) for r in rows]

    async def get_tool_call(self, tenant: str, session_id: str, call_id: str) -> ToolCallRecord | None:
        row = await self._fetch_one(
            "SELECT record_json FROM tool_calls WHERE tenant=? AND session_id=? AND call_id=?",
            (tenant, session_id, call_id),
        )
        return codec.TOOL_CALL.loads(row[0]) if row else None

    async def list_waiting_calls(self) -> list[ToolCallRecord]:
        rows = await self._fetch_all(
            "SELECT tenant, session_id, round_index, position, record_json FROM tool_calls"
            " WHERE status='PENDING' AND kind='HOSTED'"
            " UNION ALL SELECT tenant, session_id, round_index, position, record_json FROM tool_calls"
            " WHERE status='AWAITING_APPROVAL'"
            " ORDER BY 1, 2, 3, 4"
        )
        return [codec.TOOL_CALL.loads(r[4]) for r in rows]

    # ------------------------------------------------------------------ checkpoints
    async def add_checkpoint(
        self, tenant: str, session_id: str, checkpoint: Checkpoint, *, max_count: int, max_bytes: int
    ) -> list[str]:
        marker = checkpoints.AddCheckpoint(checkpoint=checkpoint, max_count=max_count, max_bytes=max_bytes)
        await self._run_operation(tenant, session_id, marker)
        return marker.dropped

    async def list_checkpoints(
        self, tenant: str, session_id: str, *, before_position: int = 0, limit: int
    ) -> list[CheckpointInfo]:
        return await checkpoints.list_checkpoints(
            self._conn(), tenant, session_id, before_position=before_position, limit=limit
        )

    async def load_checkpoints_down_to(self, tenant: str, session_id: str, checkpoint_id: str) -> list[Checkpoint]:
        return await checkpoints.load_checkpoints_down_to(self._conn(), tenant, session_id, checkpoint_id)

    async def delete_checkpoints(self, tenant: str, session_id: str, checkpoint_ids: Sequence[str]) -> None:
        await self._run_operation(
            tenant, session_id, checkpoints.DeleteCheckpoints(checkpoint_ids=list(checkpoint_ids))
        )

    # ------------------------------------------------------------------ hook registrations
    async def put_hook_registration(self, tenant: str, session_id: str, plugin_id: str, registration_json: str) -> None:
        await self._run_operation(
            tenant, session_id, HookRegistration(plugin_id=plugin_id, registration_json=registration_json)
        )

    async def delete_hook_registration(self, tenant: str, session_id: str, plugin_id: str) -> bool:
        marker = HookRegistration(plugin_id=plugin_id, registration_json=None)
        await self._run_operation(tenant, session_id, marker)
        return marker.changed

    async def list_hook_registrations(self, scope: tuple[str, str] | None = None) -> list[tuple[str, str, str, str]]:
        select = "SELECT tenant, session_id, plugin_id, registration_json FROM hook_registrations"
        if scope is None:
            rows = await self._fetch_all(select + " ORDER BY tenant, session_id, plugin_id")
        else:
            rows = await self._fetch_all(select + " WHERE tenant=? AND session_id=? ORDER BY plugin_id", scope)
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    # ------------------------------------------------------------------ idempotency
    async def get_idempotency(self, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None:
        row = await self._fetch_one(
            IDEMPOTENCY_SELECT + " WHERE tenant=? AND rpc=? AND request_id=?",
            (tenant, rpc, request_id),
        )
        return idempotency_record(tenant, rpc, request_id, row)

    async def put_idempotency(self, record: IdempotencyRecord) -> None:
        await self.write(WriteBatch(tenant=record.tenant, session_id="", idempotency=record))

    # ------------------------------------------------------------------ leases
    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        return await self.take_lease(tenant, session_id, owner, ttl_seconds=ttl_seconds) is not None

    async def take_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> int | None:
        now_us = to_us(datetime.now(UTC))
        marker = Lease(owner=owner, now_us=now_us, expires_us=now_us + int(ttl_seconds * 1_000_000))
        await self._run_operation(tenant, session_id, marker)
        return marker.version

    async def renew_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        now_us = to_us(datetime.now(UTC))
        marker = Lease(owner=owner, now_us=now_us, expires_us=now_us + int(ttl_seconds * 1_000_000), renew=True)
        await self._run_operation(tenant, session_id, marker)
        return marker.version is not None

    async def release_lease(self, tenant: str, session_id: str, owner: str) -> None:
        await self._run_operation(tenant, session_id, Lease(owner=owner, now_us=0, expires_us=0, release=True))

    async def notify(self, tenant: str, session_id: str, sequence: int) -> None:
        self.wakeups.wake(events_topic(tenant, session_id))

    def subscribe(self, topic: str, on_wake: Callable[[], None] | None = None) -> Subscription:
        # Wake-ups reach this process's waiters only; other processes on the file find commits by polling.
        return self.wakeups.subscribe(topic, on_wake)

    # ------------------------------------------------------------------ relayed commands
    async def put_command(self, command: SessionCommand) -> None:
        await self._run_operation(command.tenant, command.session_id, commands.PutCommand(command))
        self.wakeups.wake(commands_topic())

    async def claim_commands(self, owner: str) -> list[SessionCommand]:
        marker = commands.ClaimCommands(owner)
        await self._run_operation("", "", marker)
        return marker.claimed

    async def finish_command(self, tenant: str, command_id: str, result_json: str) -> None:
        await self._run_operation(tenant, "", commands.FinishCommand(command_id, result_json))
        self.wakeups.wake(answer_topic(tenant, command_id))

    async def get_command(self, tenant: str, command_id: str) -> SessionCommand | None:
        row = await self._fetch_one(commands.COMMAND_SELECT, (tenant, command_id))
        return None if row is None else commands.command_from_row(tenant, command_id, row)

    async def withdraw_command(self, tenant: str, command_id: str) -> bool:
        marker = commands.DeleteCommand(command_id, only_pending=True)
        await self._run_operation(tenant, "", marker)
        return marker.deleted

    async def delete_command(self, tenant: str, command_id: str) -> None:
        await self._run_operation(tenant, "", commands.DeleteCommand(command_id, only_pending=False))

    async def purge_commands(self, *, older_than: datetime) -> int:
        marker = commands.PurgeCommands(to_us(older_than))
        await self._run_operation("", "", marker)
        return marker.purged

    async def lease_holder(self, tenant: str, session_id: str) -> str:
        row = await self._fetch_one(commands.LEASE_SELECT, (tenant, session_id, commands.now_us()))
        return "" if row is None else str(row[0])
