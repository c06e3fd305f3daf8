"""The default SessionStore: one SQLite file through aiosqlite, WAL mode.

Writes go through one writer task with group commit: batches queued within `flush_interval` (or until a
durable write arrives) share one transaction, so a 1,000-delta turn costs a handful of commits, not a
thousand. Reads use their own connection and see committed data only; callers that must read their own
buffered writes call `flush()` first."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from general_agent_server.core import codec
from general_agent_server.core.checkpoint_files import CheckpointFile
from general_agent_server.core.checkpoints import Checkpoint, CheckpointInfo
from general_agent_server.core.events import SequencedEvent
from general_agent_server.core.history import HistoryMessage
from general_agent_server.core.runs import IdempotencyRecord, RunRecord, RunStatus, ToolCallRecord
from general_agent_server.core.session import (
    SessionIdentity,
    SessionMode,
    SessionRecord,
    SessionState,
    Usage,
)
from general_agent_server.core.transcript import TranscriptEntry
from general_agent_server.store.migrations import MIGRATIONS
from general_agent_server.store.port import (
    ListCursor,
    SessionExistsError,
    SessionQuery,
    StoreError,
    VersionConflictError,
    WriteBatch,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

DB_FILE_NAME = "general-agent.sqlite3"


def to_us(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def from_us(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1_000_000, tz=UTC)


@dataclass
class _QueuedWrite:
    batch: WriteBatch
    done: asyncio.Future[None] | None
    # Session creation, deletion and leases ride the same queue as batches so they are ordered with
    # them; the operation runs first in the batch's transaction.
    operation: _Operation | None = None


class SqliteSessionStore:
    """SessionStore on SQLite (see module docstring)."""

    def __init__(self, path: Path, *, flush_interval: float = 0.02, busy_timeout_ms: int = 5000) -> None:
        self._path = path
        self._flush_interval = flush_interval
        self._busy_timeout_ms = busy_timeout_ms
        # Writes run on one dedicated thread with its own sqlite3 connection: a group commit is one hand-off
        # to that thread, not one per statement. Reads use aiosqlite.
        self._writer: sqlite3.Connection | None = None
        self._writer_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
        self._reader: aiosqlite.Connection | None = None
        self._queue: asyncio.Queue[_QueuedWrite | None] = asyncio.Queue()
        self._urgent = asyncio.Event()
        self._writer_task: asyncio.Task[None] | None = None

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
            self._writer = await self._on_writer(self._open_writer)
            self._reader = await aiosqlite.connect(self._path, isolation_level=None)
            await self._reader.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
        except BaseException:
            # A half-opened store must not keep its connection threads alive (the process would hang).
            await self._close_connections()
            raise
        self._writer_task = asyncio.create_task(self._write_loop(), name="sqlite-writer")

    async def close(self) -> None:
        if self._writer_task is not None:
            await self._queue.put(None)
            self._urgent.set()
            await self._writer_task
            self._writer_task = None
        await self._close_connections()
        self._writer_thread.shutdown(wait=False)

    async def _close_connections(self) -> None:
        if self._reader is not None:
            await self._reader.close()
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            await self._on_writer(writer.close)

    async def _on_writer(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._writer_thread, fn, *args)

    def _open_writer(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("PRAGMA user_version").fetchone()
        current = int(row[0]) if row else 0
        if current > len(MIGRATIONS):
            raise StoreError(
                f"state file {self._path} has schema version {current}, newer than this server "
                f"({len(MIGRATIONS)}); upgrade the server"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            logger.info("migrating state schema to version %d", version, extra={"category": "system"})
            script = MIGRATIONS[version - 1]
            conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version={version};\nCOMMIT;")

    def _conn(self, which: aiosqlite.Connection | None) -> aiosqlite.Connection:
        if which is None:
            raise StoreError("store is not open")
        return which

    # ------------------------------------------------------------------ writer
    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        if self._writer_task is None:
            raise StoreError("store is not open")
        if not durable:
            self._queue.put_nowait(_QueuedWrite(batch, None))
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_QueuedWrite(batch, done))
        self._urgent.set()
        await done

    async def _run_operation(self, batch: WriteBatch, operation: _Operation) -> None:
        if self._writer_task is None:
            raise StoreError("store is not open")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_QueuedWrite(batch, done, operation))
        self._urgent.set()
        await done

    async def flush(self) -> None:
        await self.write(WriteBatch(tenant="", session_id=""), durable=True)

    async def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            group = [first]
            if first.done is None and not self._urgent.is_set():
                # Only buffered writes so far: give more a moment to arrive, unless one must commit now.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self._flush_interval)
            self._urgent.clear()
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                group.append(item)
            await self._commit_group(group)
        # Drain anything left so no caller waits forever.
        rest: list[_QueuedWrite] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                rest.append(item)
        if rest:
            await self._commit_group(rest)

    async def _commit_group(self, group: list[_QueuedWrite]) -> None:
        errors = await self._on_writer(self._commit_group_sync, group)
        for item, error in zip(group, errors, strict=True):
            self._settle(item, error)

    def _commit_group_sync(self, group: list[_QueuedWrite]) -> list[BaseException | None]:
        """Commits a group in one transaction (on the writer thread). On failure each batch is retried alone
        so only the failing one reports the error; the writer itself never dies (a locked or failing
        database fails the writes of that moment, and later writes proceed)."""
        conn = self._writer
        if conn is None:
            return [StoreError("store is not open")] * len(group)
        try:
            self._transaction(conn, group)
        except Exception as exc:
            if len(group) == 1:
                return [exc]
            errors: list[BaseException | None] = []
            for item in group:
                try:
                    self._transaction(conn, [item])
                except Exception as single:
                    errors.append(single)
                else:
                    errors.append(None)
            return errors
        return [None] * len(group)

    def _transaction(self, conn: sqlite3.Connection, items: list[_QueuedWrite]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for item in items:
                self._apply(conn, item)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _settle(item: _QueuedWrite, error: BaseException | None) -> None:
        if item.done is None:
            if error is not None:
                logger.error("buffered write failed: %s", error, extra={"category": "system"})
            return
        if item.done.done():
            return
        if error is None:
            item.done.set_result(None)
        else:
            item.done.set_exception(error if isinstance(error, StoreError) else StoreError(str(error)))

    def _apply(self, conn: sqlite3.Connection, item: _QueuedWrite) -> None:
        batch = item.batch
        if item.operation is not None:
            item.operation.run(conn, batch)
        tenant, sid = batch.tenant, batch.session_id
        if batch.session is not None:
            self._update_session(conn, batch.session)
        if batch.replace_history:
            conn.execute("DELETE FROM history WHERE tenant=? AND session_id=?", (tenant, sid))
        if batch.history:
            conn.executemany(
                "INSERT OR REPLACE INTO history (tenant, session_id, idx, run_id, format_version, message_json)"
                " VALUES (?,?,?,?,?,?)",
                [
                    (
                        tenant,
                        sid,
                        batch.history_base + i,
                        m.run_id,
                        m.format_version,
                        codec.HISTORY_MESSAGE.dumps(m),
                    )
                    for i, m in enumerate(batch.history)
                ],
            )
        if batch.clear_transcript:
            conn.execute("DELETE FROM transcript WHERE tenant=? AND session_id=?", (tenant, sid))
        if batch.transcript:
            conn.executemany(
                "INSERT INTO transcript (tenant, session_id, sequence, run_id, timestamp_us, entry_json)"
                " VALUES (?,?,?,?,?,?)",
                [
                    (
                        tenant,
                        sid,
                        e.sequence,
                        e.run_id,
                        to_us(e.timestamp),
                        codec.TRANSCRIPT_BODY.dumps(e.body),
                    )
                    for e in batch.transcript
                ],
            )
        if batch.events:
            conn.executemany(
                "INSERT INTO events (tenant, session_id, sequence, run_id, create_time_us, body_json)"
                " VALUES (?,?,?,?,?,?)",
                [
                    (tenant, sid, e.sequence, e.run_id, to_us(e.create_time), codec.EVENT_BODY.dumps(e.body))
                    for e in batch.events
                ],
            )
        for run in batch.runs:
            conn.execute(
                "INSERT OR REPLACE INTO runs (tenant, session_id, run_id, request_id, status, record_json)"
                " VALUES (?,?,?,?,?,?)",
                (
                    run.tenant,
                    run.session_id,
                    run.run_id,
                    run.request_id,
                    run.status.value,
                    codec.RUN_RECORD.dumps(run),
                ),
            )
        if batch.tool_calls:
            conn.executemany(
                "INSERT OR REPLACE INTO tool_calls (tenant, session_id, call_id, run_id, round_index, position, kind,"
                " status, deadline_us, record_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        c.tenant,
                        c.session_id,
                        c.call_id,
                        c.run_id,
                        c.round_index,
                        c.position,
                        c.kind.value,
                        c.status.value,
                        to_us(c.deadline) if c.deadline else None,
                        codec.TOOL_CALL.dumps(c),
                    )
                    for c in batch.tool_calls
                ],
            )
        if batch.idempotency is not None:
            self._insert_idempotency(conn, batch.idempotency)
        for plugin_id, registration_json in batch.hook_registrations:
            _HookRegistration(plugin_id=plugin_id, registration_json=registration_json).run(conn, batch)

    def _update_session(self, conn: sqlite3.Connection, record: SessionRecord) -> None:
        cur = conn.execute(
            "UPDATE sessions SET session_key=?, mode=?, parent_session_id=?, state=?, config_json=?,"
            " labels_json=?, runtime_json=?, last_sequence=?, sequence_reserved=?, history_message_count=?,"
            " update_time_us=?, version=? WHERE tenant=? AND session_id=? AND version=?",
            (*self._session_columns(record)[2:], record.tenant, record.session_id, record.version - 1),
        )
        if cur.rowcount != 1:
            raise VersionConflictError(f"session {record.session_id!r}: expected stored version {record.version - 1}")

    @staticmethod
    def _session_columns(record: SessionRecord) -> tuple[Any, ...]:
        runtime = {
            "active_run_id": record.active_run_id,
            "pending_call_ids": list(record.pending_call_ids),
            "stop_requested": record.stop_requested,
            "usage_snapshot": codec.USAGE_SNAPSHOT.to_jsonable(record.usage_snapshot)
            if record.usage_snapshot
            else None,
            "cumulative_usage": codec.USAGE.to_jsonable(record.cumulative_usage),
            "forked_from": codec.FORK_ORIGIN.to_jsonable(record.forked_from) if record.forked_from else None,
            "pending_injections": [codec.CONTENT_PARTS.to_jsonable(parts) for parts in record.pending_injections],
        }
        return (
            record.tenant,
            record.session_id,
            record.identity.session_key,
            record.identity.mode.value,
            record.parent_session_id,
            record.state.value,
            codec.SESSION_CONFIG.dumps(record.config),
            json.dumps(dict(record.config.labels), sort_keys=True),
            json.dumps(runtime),
            record.last_sequence,
            record.sequence_reserved,
            record.history_message_count,
            to_us(record.update_time),
            record.version,
        )

    @staticmethod
    def _record_from_row(row: sqlite3.Row | tuple[Any, ...]) -> SessionRecord:
        (
            tenant,
            session_id,
            session_key,
            mode,
            parent,
            state,
            config_json,
            runtime_json,
            last_sequence,
            sequence_reserved,
            history_count,
            create_us,
            update_us,
            version,
        ) = row
        runtime = json.loads(runtime_json)
        snapshot = runtime.get("usage_snapshot")
        forked = runtime.get("forked_from")
        return SessionRecord(
            tenant=tenant,
            identity=SessionIdentity(mode=SessionMode(mode), session_id=session_id, session_key=session_key),
            config=codec.SESSION_CONFIG.loads(config_json),
            create_time=from_us(create_us),
            update_time=from_us(update_us),
            parent_session_id=parent,
            forked_from=codec.FORK_ORIGIN.loads(json.dumps(forked)) if forked else None,
            state=SessionState(state),
            active_run_id=runtime.get("active_run_id", ""),
            pending_call_ids=tuple(runtime.get("pending_call_ids", ())),
            stop_requested=bool(runtime.get("stop_requested", False)),
            usage_snapshot=codec.USAGE_SNAPSHOT.loads(json.dumps(snapshot)) if snapshot else None,
            cumulative_usage=codec.USAGE.loads(json.dumps(runtime["cumulative_usage"]))
            if runtime.get("cumulative_usage")
            else Usage(),
            last_sequence=last_sequence,
            sequence_reserved=sequence_reserved,
            history_message_count=history_count,
            version=version,
            pending_injections=tuple(
                codec.CONTENT_PARTS.loads(json.dumps(parts)) for parts in runtime.get("pending_injections", ())
            ),
        )

    _SESSION_SELECT = (
        "SELECT tenant, session_id, session_key, mode, parent_session_id, state, config_json, runtime_json,"
        " last_sequence, sequence_reserved, history_message_count, create_time_us, update_time_us, version"
        " FROM sessions"
    )

    # ------------------------------------------------------------------ sessions
    async def create_session(self, record: SessionRecord, *, batch: WriteBatch | None = None) -> None:
        create_batch = batch or WriteBatch(tenant=record.tenant, session_id=record.session_id)
        await self._run_operation(create_batch, _InsertSession(record=record))

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord | None:
        conn = self._conn(self._reader)
        async with conn.execute(self._SESSION_SELECT + " WHERE tenant=? AND session_id=?", (tenant, session_id)) as cur:
            row = await cur.fetchone()
        return self._record_from_row(tuple(row)) if row else None

    async def list_sessions(
        self, tenant: str, query: SessionQuery, *, after: ListCursor | None, limit: int
    ) -> list[SessionRecord]:
        clauses = ["tenant=?"]
        params: list[Any] = [tenant]
        if query.session_key_prefix:
            clauses.append("substr(session_key, 1, ?) = ?")
            params += [len(query.session_key_prefix), query.session_key_prefix]
        if query.mode is not None:
            clauses.append("mode=?")
            params.append(query.mode.value)
        if query.parent_session_id:
            clauses.append("parent_session_id=?")
            params.append(query.parent_session_id)
        elif not query.include_children:
            clauses.append("parent_session_id=''")
        for key, value in sorted(query.labels.items()):
            clauses.append("json_extract(labels_json, ?) = ?")
            params += [f'$."{key}"', value]
        if after is not None:
            clauses.append("(update_time_us < ? OR (update_time_us = ? AND session_id > ?))")
            cursor_us = to_us(after.update_time)
            params += [cursor_us, cursor_us, after.session_id]
        sql = (
            self._SESSION_SELECT
            + " WHERE "
            + " AND ".join(clauses)
            + " ORDER BY update_time_us DESC, session_id ASC LIMIT ?"
        )
        params.append(limit)
        conn = self._conn(self._reader)
        async with conn.execute(sql, params) as cur:
            rows = await cur.fetchall()
        return [self._record_from_row(tuple(r)) for r in rows]

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        marker = _DeleteSession()
        await self._run_operation(WriteBatch(tenant=tenant, session_id=session_id), marker)
        return marker.deleted

    # ------------------------------------------------------------------ reads
    async def load_history(self, tenant: str, session_id: str) -> list[HistoryMessage]:
        messages, _ = await self.load_history_sized(tenant, session_id)
        return messages

    async def load_history_sized(self, tenant: str, session_id: str) -> tuple[list[HistoryMessage], int]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT message_json FROM history WHERE tenant=? AND session_id=? ORDER BY idx",
            (tenant, session_id),
        ) as cur:
            rows = await cur.fetchall()
        return [codec.HISTORY_MESSAGE.loads(r[0]) for r in rows], sum(len(r[0]) for r in rows)

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT entry_id, sequence, run_id, timestamp_us, entry_json FROM transcript"
            " WHERE tenant=? AND session_id=? AND entry_id>? ORDER BY entry_id LIMIT ?",
            (tenant, session_id, after_entry_id, limit),
        ) as cur:
            rows = await cur.fetchall()
        return [
            TranscriptEntry(
                entry_id=r[0],
                sequence=r[1],
                run_id=r[2],
                timestamp=from_us(r[3]),
                body=codec.TRANSCRIPT_BODY.loads(r[4]),
            )
            for r in rows
        ]

    async def count_transcript(self, tenant: str, session_id: str) -> int:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT COUNT(*) FROM transcript WHERE tenant=? AND session_id=?", (tenant, session_id)
        ) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT sequence, run_id, create_time_us, body_json FROM events"
            " WHERE tenant=? AND session_id=? AND sequence>? ORDER BY sequence LIMIT ?",
            (tenant, session_id, after_sequence, limit),
        ) as cur:
            rows = await cur.fetchall()
        return [
            SequencedEvent(
                sequence=r[0],
                session_id=session_id,
                run_id=r[1],
                create_time=from_us(r[2]),
                body=codec.EVENT_BODY.loads(r[3]),
            )
            for r in rows
        ]

    async def purge_events(self, tenant: str, session_id: str, *, keep_last: int, older_than: datetime) -> None:
        await self._run_operation(
            WriteBatch(tenant=tenant, session_id=session_id),
            _PurgeEvents(keep_last=max(1, keep_last), older_than_us=to_us(older_than)),
        )

    async def oldest_event_sequence(self, tenant: str, session_id: str) -> int | None:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT MIN(sequence) FROM events WHERE tenant=? AND session_id=?", (tenant, session_id)
        ) as cur:
            row = await cur.fetchone()
        return int(row[0]) if row and row[0] is not None else None

    async def get_run(self, tenant: str, session_id: str, run_id: str) -> RunRecord | None:
        return await self._one_run(
            "SELECT record_json FROM runs WHERE tenant=? AND session_id=? AND run_id=?",
            (tenant, session_id, run_id),
        )

    async def find_run_by_request_id(self, tenant: str, session_id: str, request_id: str) -> RunRecord | None:
        return await self._one_run(
            "SELECT record_json FROM runs WHERE tenant=? AND session_id=? AND request_id=?",
            (tenant, session_id, request_id),
        )

    async def _one_run(self, sql: str, params: tuple[Any, ...]) -> RunRecord | None:
        conn = self._conn(self._reader)
        async with conn.execute(sql, params) as cur:
            row = await cur.fetchone()
        return codec.RUN_RECORD.loads(row[0]) if row else None

    async def list_tool_calls(self, tenant: str, session_id: str, run_id: str) -> list[ToolCallRecord]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT record_json FROM tool_calls WHERE tenant=? AND session_id=? AND run_id=?"
            " ORDER BY round_index, position",
            (tenant, session_id, run_id),
        ) as cur:
            rows = await cur.fetchall()
        return [codec.TOOL_CALL.loads(r[0]) for r in rows]

    async def get_tool_call(self, tenant: str, session_id: str, call_id: str) -> ToolCallRecord | None:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT record_json FROM tool_calls WHERE tenant=? AND session_id=? AND call_id=?",
            (tenant, session_id, call_id),
        ) as cur:
            row = await cur.fetchone()
        return codec.TOOL_CALL.loads(row[0]) if row else None

    async def list_pending_hosted_calls(self) -> list[ToolCallRecord]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT record_json FROM tool_calls WHERE status='PENDING' AND kind='HOSTED'"
            " ORDER BY tenant, session_id, round_index, position"
        ) as cur:
            rows = await cur.fetchall()
        return [codec.TOOL_CALL.loads(r[0]) for r in rows]

    async def list_runs(self, tenant: str, session_id: str) -> list[RunRecord]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT record_json FROM runs WHERE tenant=? AND session_id=?", (tenant, session_id)
        ) as cur:
            rows = await cur.fetchall()
        return sorted((codec.RUN_RECORD.loads(r[0]) for r in rows), key=lambda r: r.first_sequence)

    async def list_unfinished_runs(self) -> list[RunRecord]:
        conn = self._conn(self._reader)
        async with conn.execute("SELECT record_json FROM runs WHERE status != ?", (RunStatus.FINISHED.value,)) as cur:
            rows = await cur.fetchall()
        return [codec.RUN_RECORD.loads(r[0]) for r in rows]

    # ------------------------------------------------------------------ checkpoints
    async def add_checkpoint(
        self, tenant: str, session_id: str, checkpoint: Checkpoint, *, max_count: int, max_bytes: int
    ) -> list[str]:
        marker = _AddCheckpoint(checkpoint=checkpoint, max_count=max_count, max_bytes=max_bytes)
        await self._run_operation(WriteBatch(tenant=tenant, session_id=session_id), marker)
        return marker.dropped

    async def list_checkpoints(
        self, tenant: str, session_id: str, *, before_position: int = 0, limit: int
    ) -> list[CheckpointInfo]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT position, checkpoint_id, run_id, call_id, tool_name, create_time_us, paths_json, stored_bytes"
            " FROM checkpoints WHERE tenant=? AND session_id=? AND (?=0 OR position<?) ORDER BY position DESC LIMIT ?",
            (tenant, session_id, before_position, before_position, limit),
        ) as cur:
            rows = await cur.fetchall()
        return [
            CheckpointInfo(
                position=r[0],
                checkpoint_id=r[1],
                run_id=r[2],
                call_id=r[3],
                tool_name=r[4],
                created_at=from_us(r[5]),
                paths=tuple(json.loads(r[6])),
                stored_bytes=r[7],
            )
            for r in rows
        ]

    async def load_checkpoints_down_to(self, tenant: str, session_id: str, checkpoint_id: str) -> list[Checkpoint]:
        conn = self._conn(self._reader)
        # One statement, so the checkpoints and their files come from one consistent snapshot.
        async with conn.execute(
            "SELECT c.checkpoint_id, c.run_id, c.call_id, c.tool_name, c.create_time_us,"
            " f.path, f.existed_before, f.content"
            " FROM checkpoints c LEFT JOIN checkpoint_files f"
            " ON f.tenant=c.tenant AND f.session_id=c.session_id AND f.checkpoint_id=c.checkpoint_id"
            " WHERE c.tenant=? AND c.session_id=? AND c.position >="
            " (SELECT position FROM checkpoints WHERE tenant=? AND session_id=? AND checkpoint_id=?)"
            " ORDER BY c.position DESC, f.idx",
            (tenant, session_id, tenant, session_id, checkpoint_id),
        ) as cur:
            rows = await cur.fetchall()
        headers: dict[str, tuple[Any, ...]] = {}
        files: dict[str, list[CheckpointFile]] = {}
        for r in rows:
            headers.setdefault(r[0], tuple(r[:5]))
            bucket = files.setdefault(r[0], [])
            if r[5] is not None:
                bucket.append(CheckpointFile(path=r[5], existed_before=bool(r[6]), prior_content=bytes(r[7])))
        return [
            Checkpoint(
                checkpoint_id=cid,
                run_id=run_id,
                call_id=call_id,
                tool_name=tool_name,
                created_at=from_us(create_us),
                files=tuple(files[cid]),
            )
            for cid, (_, run_id, call_id, tool_name, create_us) in headers.items()
        ]

    async def delete_checkpoints(self, tenant: str, session_id: str, checkpoint_ids: Sequence[str]) -> None:
        await self._run_operation(
            WriteBatch(tenant=tenant, session_id=session_id), _DeleteCheckpoints(checkpoint_ids=list(checkpoint_ids))
        )

    # ------------------------------------------------------------------ idempotency
    async def put_hook_registration(self, tenant: str, session_id: str, plugin_id: str, registration_json: str) -> None:
        await self._run_operation(
            WriteBatch(tenant=tenant, session_id=session_id),
            _HookRegistration(plugin_id=plugin_id, registration_json=registration_json),
        )

    async def delete_hook_registration(self, tenant: str, session_id: str, plugin_id: str) -> bool:
        marker = _HookRegistration(plugin_id=plugin_id, registration_json=None)
        await self._run_operation(WriteBatch(tenant=tenant, session_id=session_id), marker)
        return marker.changed

    async def list_hook_registrations(self) -> list[tuple[str, str, str, str]]:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT tenant, session_id, plugin_id, registration_json FROM hook_registrations"
            " ORDER BY tenant, session_id, plugin_id"
        ) as cur:
            rows = await cur.fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    async def get_idempotency(self, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None:
        conn = self._conn(self._reader)
        async with conn.execute(
            "SELECT body_hash, result_json, create_time_us FROM idempotency WHERE tenant=? AND rpc=? AND request_id=?",
            (tenant, rpc, request_id),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return IdempotencyRecord(
            tenant=tenant,
            rpc=rpc,
            request_id=request_id,
            body_hash=row[0],
            result_json=row[1],
            create_time=from_us(row[2]),
        )

    async def put_idempotency(self, record: IdempotencyRecord) -> None:
        await self.write(WriteBatch(tenant=record.tenant, session_id="", idempotency=record))

    @staticmethod
    def _insert_idempotency(conn: sqlite3.Connection, record: IdempotencyRecord) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO idempotency (tenant, rpc, request_id, body_hash, result_json, create_time_us)"
            " VALUES (?,?,?,?,?,?)",
            (
                record.tenant,
                record.rpc,
                record.request_id,
                record.body_hash,
                record.result_json,
                to_us(record.create_time),
            ),
        )

    # ------------------------------------------------------------------ leases
    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        now = datetime.now(UTC)
        now_us = to_us(now)
        marker = _Lease(owner=owner, now_us=now_us, expires_us=now_us + int(ttl_seconds * 1_000_000))
        await self._run_operation(WriteBatch(tenant=tenant, session_id=session_id), marker)
        return marker.acquired

    async def release_lease(self, tenant: str, session_id: str, owner: str) -> None:
        await self._run_operation(
            WriteBatch(tenant=tenant, session_id=session_id),
            _Lease(owner=owner, now_us=0, expires_us=0, release=True),
        )

    async def notify(self, tenant: str, session_id: str, sequence: int) -> None:
        return None


# ---------------------------------------------------------------------- special writes


@dataclass
class _InsertSession:
    record: SessionRecord

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        r = self.record
        cols = SqliteSessionStore._session_columns(r)
        try:
            conn.execute(
                "INSERT INTO sessions (tenant, session_id, session_key, mode, parent_session_id, state, config_json,"
                " labels_json, runtime_json, last_sequence, sequence_reserved, history_message_count,"
                " update_time_us, version, create_time_us) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*cols, to_us(r.create_time)),
            )
        except sqlite3.IntegrityError as exc:
            raise SessionExistsError(f"session {r.session_id!r} already exists") from exc


@dataclass
class _DeleteSession:
    deleted: bool = False

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        cur = conn.execute("DELETE FROM sessions WHERE tenant=? AND session_id=?", key)
        self.deleted = cur.rowcount == 1
        for table in (
            "history",
            "transcript",
            "events",
            "runs",
            "tool_calls",
            "hook_registrations",
            "checkpoints",
            "checkpoint_files",
        ):
            conn.execute(f"DELETE FROM {table} WHERE tenant=? AND session_id=?", key)  # noqa: S608


@dataclass
class _Lease:
    owner: str
    now_us: int
    expires_us: int
    release: bool = False
    acquired: bool = False

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        if self.release:
            conn.execute(
                "UPDATE sessions SET lease_owner='', lease_expires_us=0 WHERE tenant=? AND session_id=?"
                " AND lease_owner=?",
                (*key, self.owner),
            )
            return
        cur = conn.execute(
            "UPDATE sessions SET lease_owner=?, lease_expires_us=? WHERE tenant=? AND session_id=?"
            " AND (lease_owner='' OR lease_owner=? OR lease_expires_us<?)",
            (self.owner, self.expires_us, *key, self.owner, self.now_us),
        )
        self.acquired = cur.rowcount == 1


@dataclass
class _PurgeEvents:
    keep_last: int
    older_than_us: int

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        row = conn.execute(
            "SELECT sequence FROM events WHERE tenant=? AND session_id=? ORDER BY sequence DESC LIMIT 1 OFFSET ?",
            (*key, self.keep_last - 1),
        ).fetchone()
        newest_kept_floor = int(row[0]) if row else 0
        newest = conn.execute("SELECT MAX(sequence) FROM events WHERE tenant=? AND session_id=?", key).fetchone()
        conn.execute(
            "DELETE FROM events WHERE tenant=? AND session_id=? AND sequence < ? AND "
            "(sequence < ? OR create_time_us < ?)",
            (*key, int(newest[0] or 0), newest_kept_floor, self.older_than_us),
        )


@dataclass
class _HookRegistration:
    plugin_id: str
    registration_json: str | None  # None = delete
    changed: bool = False

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id, self.plugin_id)
        if self.registration_json is None:
            cur = conn.execute("DELETE FROM hook_registrations WHERE tenant=? AND session_id=? AND plugin_id=?", key)
        else:
            cur = conn.execute(
                "INSERT OR REPLACE INTO hook_registrations (tenant, session_id, plugin_id, registration_json)"
                " VALUES (?,?,?,?)",
                (*key, self.registration_json),
            )
        self.changed = cur.rowcount > 0


def _delete_checkpoint_rows(conn: sqlite3.Connection, key: tuple[str, str], checkpoint_ids: Sequence[str]) -> None:
    rows = [(*key, cid) for cid in checkpoint_ids]
    conn.executemany("DELETE FROM checkpoint_files WHERE tenant=? AND session_id=? AND checkpoint_id=?", rows)
    conn.executemany("DELETE FROM checkpoints WHERE tenant=? AND session_id=? AND checkpoint_id=?", rows)


@dataclass
class _AddCheckpoint:
    checkpoint: Checkpoint
    max_count: int
    max_bytes: int
    dropped: list[str] = field(default_factory=list)

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        if conn.execute("SELECT 1 FROM sessions WHERE tenant=? AND session_id=?", key).fetchone() is None:
            return
        c = self.checkpoint
        conn.execute(
            "INSERT INTO checkpoints (tenant, session_id, checkpoint_id, run_id, call_id, tool_name, create_time_us,"
            " stored_bytes, paths_json) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                *key,
                c.checkpoint_id,
                c.run_id,
                c.call_id,
                c.tool_name,
                to_us(c.created_at),
                c.stored_bytes,
                json.dumps(list(c.paths)),
            ),
        )
        conn.executemany(
            "INSERT INTO checkpoint_files (tenant, session_id, checkpoint_id, idx, path, existed_before, content)"
            " VALUES (?,?,?,?,?,?,?)",
            [(*key, c.checkpoint_id, i, f.path, int(f.existed_before), f.prior_content) for i, f in enumerate(c.files)],
        )
        # Oldest first, the new one last: the chain stays contiguous from the newest end.
        rows = conn.execute(
            "SELECT checkpoint_id, stored_bytes FROM checkpoints WHERE tenant=? AND session_id=? ORDER BY position",
            key,
        ).fetchall()
        count, total = len(rows), sum(int(r[1]) for r in rows)
        for checkpoint_id, stored_bytes in rows:
            if count <= self.max_count and total <= self.max_bytes:
                break
            self.dropped.append(str(checkpoint_id))
            count, total = count - 1, total - int(stored_bytes)
        _delete_checkpoint_rows(conn, key, self.dropped)


@dataclass
class _DeleteCheckpoints:
    checkpoint_ids: list[str]

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        _delete_checkpoint_rows(conn, (batch.tenant, batch.session_id), self.checkpoint_ids)


_Operation = (
    _InsertSession | _DeleteSession | _Lease | _PurgeEvents | _HookRegistration | _AddCheckpoint | _DeleteCheckpoints
)
