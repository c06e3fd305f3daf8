"""Writes on PostgreSQL, each inside the writer's transaction: one WriteBatch (the session row first, so a failed
compare-and-set writes nothing else), and the operations beside batches (store/sqlite/operations.py has the same
set for SQLite). An operation that answers something keeps the answer on itself."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from general_agent_server.domain import codec
from general_agent_server.domain.session import SessionRecord
from general_agent_server.store.port import SessionExistsError, WriteBatch
from general_agent_server.store.postgres.steps import StepParts, write_step
from general_agent_server.store.rows import config_document, session_columns, to_us
from general_agent_server.store.sqlite.operations import SESSION_TABLES
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, beyond_bounds

# A connection of its own or one borrowed from the pool.
Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"


class PgOperation(Protocol):
    async def run(self, conn: Conn, batch: WriteBatch) -> None: ...


async def apply_write(conn: Conn, batch: WriteBatch, operation: PgOperation | None) -> None:
    if operation is not None:
        await operation.run(conn, batch)
    tenant, sid = batch.tenant, batch.session_id
    written = _NOTHING
    if batch.session is not None:
        written = await write_step(conn, batch.session, batch)
    elif batch.release_lease:
        await conn.execute(
            "UPDATE sessions SET lease_owner='', lease_expires_us=0 WHERE tenant=$1 AND session_id=$2"
            " AND lease_owner=$3",
            tenant,
            sid,
            batch.release_lease,
        )
    if batch.replace_history:
        await conn.execute("DELETE FROM history WHERE tenant=$1 AND session_id=$2", tenant, sid)
    if batch.history and not written.history:
        await conn.executemany(
            "INSERT INTO history (tenant, session_id, idx, run_id, format_version, message_json)"
            " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (tenant, session_id, idx) DO UPDATE SET"
            " run_id=EXCLUDED.run_id, format_version=EXCLUDED.format_version, message_json=EXCLUDED.message_json",
            [
                (tenant, sid, batch.history_base + i, m.run_id, m.format_version, codec.HISTORY_MESSAGE.dumps(m))
                for i, m in enumerate(batch.history)
            ],
        )
    if batch.clear_transcript:
        await conn.execute("DELETE FROM transcript WHERE tenant=$1 AND session_id=$2", tenant, sid)
    if batch.transcript and not written.transcript:
        await conn.executemany(
            "INSERT INTO transcript (tenant, session_id, sequence, run_id, timestamp_us, entry_json)"
            " VALUES ($1,$2,$3,$4,$5,$6)",
            [
                (tenant, sid, e.sequence, e.run_id, to_us(e.timestamp), codec.TRANSCRIPT_BODY.dumps(e.body))
                for e in batch.transcript
            ],
        )
    await _write_rows(conn, batch, written)


_NOTHING = StepParts(events=False, history=False, runs=False, transcript=False, tool_calls=False)


async def _write_rows(conn: Conn, batch: WriteBatch, written: StepParts) -> None:
    if batch.events and not written.events:
        await conn.executemany(
            "INSERT INTO events (tenant, session_id, sequence, run_id, create_time_us, body_json)"
            " VALUES ($1,$2,$3,$4,$5,$6)",
            [
                (
                    batch.tenant,
                    batch.session_id,
                    e.sequence,
                    e.run_id,
                    to_us(e.create_time),
                    codec.EVENT_BODY.dumps(e.body),
                )
                for e in batch.events
            ],
        )
    for run in () if written.runs else batch.runs:
        await conn.execute(
            "INSERT INTO runs (tenant, session_id, run_id, request_id, status, record_json) VALUES ($1,$2,$3,$4,$5,$6)"
            " ON CONFLICT (tenant, session_id, run_id) DO UPDATE SET request_id=EXCLUDED.request_id,"
            " status=EXCLUDED.status, record_json=EXCLUDED.record_json",
            run.tenant,
            run.session_id,
            run.run_id,
            run.request_id,
            run.status.value,
            codec.RUN_RECORD.dumps(run),
        )
    if batch.tool_calls and not written.tool_calls:
        await conn.executemany(
            "INSERT INTO tool_calls (tenant, session_id, call_id, run_id, round_index, position, kind, status,"
            " deadline_us, record_json) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)"
            " ON CONFLICT (tenant, session_id, call_id) DO UPDATE SET run_id=EXCLUDED.run_id,"
            " round_index=EXCLUDED.round_index, position=EXCLUDED.position, kind=EXCLUDED.kind,"
            " status=EXCLUDED.status, deadline_us=EXCLUDED.deadline_us, record_json=EXCLUDED.record_json",
            [
                (
                    *(c.tenant, c.session_id, c.call_id, c.run_id, c.round_index, c.position),
                    *(c.kind.value, c.status.value, to_us(c.deadline) if c.deadline else None),
                    codec.TOOL_CALL.dumps(c),
                )
                for c in batch.tool_calls
            ],
        )
    if (r := batch.idempotency) is not None:
        await conn.execute(
            "INSERT INTO idempotency (tenant, rpc, request_id, body_hash, result_json, create_time_us)"
            " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (tenant, rpc, request_id) DO UPDATE SET"
            " body_hash=EXCLUDED.body_hash, result_json=EXCLUDED.result_json, create_time_us=EXCLUDED.create_time_us",
            *(r.tenant, r.rpc, r.request_id, r.body_hash, r.result_json, to_us(r.create_time)),
        )
    for plugin_id, registration_json in batch.hook_registrations:
        await HookRegistration(plugin_id=plugin_id, registration_json=registration_json).run(conn, batch)


@dataclass
class InsertSession:
    record: SessionRecord

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        r = self.record
        # The config's row is inserted only with the session's: the statement inserts one row or none.
        status = await conn.execute(
            "WITH inserted AS (INSERT INTO sessions (tenant, session_id, session_key, mode, parent_session_id, state,"
            " labels_json, runtime_json, last_sequence, sequence_reserved, history_message_count, update_time_us,"
            " version, create_time_us, config_json) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,'')"
            " ON CONFLICT (tenant, session_id) DO NOTHING RETURNING tenant, session_id)"
            " INSERT INTO session_configs (tenant, session_id, config_json) SELECT tenant, session_id, $15::text"
            " FROM inserted ON CONFLICT (tenant, session_id) DO UPDATE SET config_json = EXCLUDED.config_json",
            *session_columns(r),
            to_us(r.create_time),
            config_document(r),
        )
        if status != "INSERT 0 1":
            raise SessionExistsError(f"session {r.session_id!r} already exists")


@dataclass
class DeleteSession:
    deleted: bool = False

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        status = await conn.execute("DELETE FROM sessions WHERE tenant=$1 AND session_id=$2", *key)
        self.deleted = status == "DELETE 1"
        for table in SESSION_TABLES:
            await conn.execute(f"DELETE FROM {table} WHERE tenant=$1 AND session_id=$2", *key)  # noqa: S608


@dataclass
class Lease:
    owner: str
    now_us: int
    expires_us: int
    release: bool = False
    renew: bool = False  # extend only a lease `owner` still holds (expired too, if nobody took it); never take one
    version: int | None = None  # the session's, when the lease was taken or renewed

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        if self.release:
            await conn.execute(
                "UPDATE sessions SET lease_owner='', lease_expires_us=0 WHERE tenant=$1 AND session_id=$2"
                " AND lease_owner=$3",
                *key,
                self.owner,
            )
            return
        if self.renew:
            version = await conn.fetchval(
                "UPDATE sessions SET lease_expires_us=$1 WHERE tenant=$2 AND session_id=$3 AND lease_owner=$4"
                " RETURNING version",
                self.expires_us,
                *key,
                self.owner,
            )
            self.version = None if version is None else int(version)
            return
        version = await conn.fetchval(
            "UPDATE sessions SET lease_owner=$1, lease_expires_us=$2 WHERE tenant=$3 AND session_id=$4"
            " AND (lease_owner='' OR lease_owner=$1 OR lease_expires_us<$5) RETURNING version",
            self.owner,
            self.expires_us,
            *key,
            self.now_us,
        )
        self.version = None if version is None else int(version)


@dataclass
class PurgeEvents:
    keep_last: int
    older_than_us: int

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        floor = await conn.fetchval(
            "SELECT sequence FROM events WHERE tenant=$1 AND session_id=$2 ORDER BY sequence DESC LIMIT 1 OFFSET $3",
            *key,
            self.keep_last - 1,
        )
        newest = await conn.fetchval("SELECT MAX(sequence) FROM events WHERE tenant=$1 AND session_id=$2", *key)
        await conn.execute(
            "DELETE FROM events WHERE tenant=$1 AND session_id=$2 AND sequence < $3 AND"
            " (sequence < $4 OR create_time_us < $5)",
            *key,
            int(newest or 0),
            int(floor or 0),
            self.older_than_us,
        )


@dataclass
class HookRegistration:
    plugin_id: str
    registration_json: str | None  # None = delete
    changed: bool = False

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id, self.plugin_id)
        if self.registration_json is None:
            status = await conn.execute(
                "DELETE FROM hook_registrations WHERE tenant=$1 AND session_id=$2 AND plugin_id=$3", *key
            )
        else:
            status = await conn.execute(
                "INSERT INTO hook_registrations (tenant, session_id, plugin_id, registration_json)"
                " VALUES ($1,$2,$3,$4) ON CONFLICT (tenant, session_id, plugin_id)"
                " DO UPDATE SET registration_json=EXCLUDED.registration_json",
                *key,
                self.registration_json,
            )
        self.changed = not status.endswith(" 0")


@dataclass
class AddCheckpoint:
    checkpoint: Checkpoint
    max_count: int
    max_bytes: int
    dropped: list[str] = field(default_factory=list)

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        self.dropped = []
        key = (batch.tenant, batch.session_id)
        if await conn.fetchval("SELECT 1 FROM sessions WHERE tenant=$1 AND session_id=$2", *key) is None:
            return
        c = self.checkpoint
        await conn.execute(
            "INSERT INTO checkpoints (tenant, session_id, checkpoint_id, run_id, call_id, tool_name, create_time_us,"
            " stored_bytes, paths_json) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
            *key,
            *(c.checkpoint_id, c.run_id, c.call_id, c.tool_name, to_us(c.created_at), c.stored_bytes),
            json.dumps(list(c.paths)),
        )
        await conn.executemany(
            "INSERT INTO checkpoint_files (tenant, session_id, checkpoint_id, idx, path, existed_before, content)"
            " VALUES ($1,$2,$3,$4,$5,$6,$7)",
            [(*key, c.checkpoint_id, i, f.path, f.existed_before, f.prior_content) for i, f in enumerate(c.files)],
        )
        rows = await conn.fetch(
            "SELECT checkpoint_id, stored_bytes FROM checkpoints WHERE tenant=$1 AND session_id=$2 ORDER BY position",
            *key,
        )
        sizes = [(str(r[0]), int(r[1])) for r in rows]
        self.dropped = beyond_bounds(sizes, max_count=self.max_count, max_bytes=self.max_bytes)
        await delete_checkpoint_rows(conn, key, self.dropped)


@dataclass
class DeleteCheckpoints:
    checkpoint_ids: list[str]

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        await delete_checkpoint_rows(conn, (batch.tenant, batch.session_id), self.checkpoint_ids)


async def delete_checkpoint_rows(conn: Conn, key: tuple[str, str], ids: list[str]) -> None:
    if not ids:
        return
    await conn.execute(
        "DELETE FROM checkpoint_files WHERE tenant=$1 AND session_id=$2 AND checkpoint_id = ANY($3::text[])", *key, ids
    )
    await conn.execute(
        "DELETE FROM checkpoints WHERE tenant=$1 AND session_id=$2 AND checkpoint_id = ANY($3::text[])", *key, ids
    )
