"""Applying one WriteBatch inside the writer's transaction, one function per table.

After the operation riding with the batch (if any), the session row goes first: a failed compare-and-set
raises before anything else of the batch is written, and the caller's transaction rolls the batch back
whole either way."""

from __future__ import annotations

import sqlite3

from general_agent_server.domain import codec
from general_agent_server.domain.records import IdempotencyRecord
from general_agent_server.domain.session import SessionRecord
from general_agent_server.store.port import VersionConflictError, WriteBatch
from general_agent_server.store.rows import config_document, session_columns, to_us
from general_agent_server.store.session_steps import lease_clauses, refused_step
from general_agent_server.store.sqlite.operations import HookRegistration, Operation


def apply_write(conn: sqlite3.Connection, batch: WriteBatch, operation: Operation | None) -> None:
    """Runs the operation (if any), then writes every part of the batch."""
    if operation is not None:
        operation.run(conn, batch)
    if batch.session is not None:
        _update_session(conn, batch.session, batch)
    elif batch.release_lease:
        conn.execute(
            "UPDATE sessions SET lease_owner='', lease_expires_us=0 WHERE tenant=? AND session_id=? AND lease_owner=?",
            (batch.tenant, batch.session_id, batch.release_lease),
        )
    _write_history(conn, batch)
    _write_transcript(conn, batch)
    _write_events(conn, batch)
    _write_runs(conn, batch)
    _write_tool_calls(conn, batch)
    if batch.idempotency is not None:
        _insert_idempotency(conn, batch.idempotency)
    for plugin_id, registration_json in batch.hook_registrations:
        HookRegistration(plugin_id=plugin_id, registration_json=registration_json).run(conn, batch)


_SESSION_UPDATE = (
    "UPDATE sessions SET session_key=?, mode=?, parent_session_id=?, state=?, labels_json=?, runtime_json=?,"
    " last_sequence=?, sequence_reserved=?, history_message_count=?, update_time_us=?, version=?"
)
# Written at a step unless the batch says the config is as stored (WriteBatch.config_unchanged); SQLite writes no
# page for a row set to what it holds, so a writer that cannot tell costs a comparison, not a page.
_CONFIG_UPDATE = "UPDATE session_configs SET config_json=? WHERE tenant=? AND session_id=?"
_SESSION_WHERE = " WHERE tenant=? AND session_id=? AND version=?"


def _update_session(conn: sqlite3.Connection, record: SessionRecord, batch: WriteBatch) -> None:
    """The compare-and-set: stores `record` only over version `record.version - 1`; the lease the batch takes or
    releases goes in the same statement (one write of the row per step, not two or three)."""
    lease = lease_clauses(batch, lambda: "?")
    cur = conn.execute(
        _SESSION_UPDATE + lease.set_sql + _SESSION_WHERE + lease.where_sql,
        (*session_columns(record)[2:], *lease.set_args, *_key(record), record.version - 1, *lease.where_args),
    )
    if cur.rowcount != 1:
        row = conn.execute("SELECT version FROM sessions WHERE tenant=? AND session_id=?", _key(record)).fetchone()
        raise VersionConflictError(refused_step(batch, row[0] if row else None, record.version - 1))
    if not batch.config_unchanged:
        conn.execute(_CONFIG_UPDATE, (config_document(record), *_key(record)))


def _key(record: SessionRecord) -> tuple[str, str]:
    return record.tenant, record.session_id


def _write_history(conn: sqlite3.Connection, batch: WriteBatch) -> None:
    tenant, sid = batch.tenant, batch.session_id
    if batch.replace_history:
        conn.execute("DELETE FROM history WHERE tenant=? AND session_id=?", (tenant, sid))
    if not batch.history:
        return
    conn.executemany(
        "INSERT OR REPLACE INTO history (tenant, session_id, idx, run_id, format_version, message_json)"
        " VALUES (?,?,?,?,?,?)",
        [
            (tenant, sid, batch.history_base + i, m.run_id, m.format_version, codec.HISTORY_MESSAGE.dumps(m))
            for i, m in enumerate(batch.history)
        ],
    )


def _write_transcript(conn: sqlite3.Connection, batch: WriteBatch) -> None:
    tenant, sid = batch.tenant, batch.session_id
    if batch.clear_transcript:
        conn.execute("DELETE FROM transcript WHERE tenant=? AND session_id=?", (tenant, sid))
    if not batch.transcript:
        return
    conn.executemany(
        "INSERT INTO transcript (tenant, session_id, sequence, run_id, timestamp_us, entry_json) VALUES (?,?,?,?,?,?)",
        [
            (tenant, sid, e.sequence, e.run_id, to_us(e.timestamp), codec.TRANSCRIPT_BODY.dumps(e.body))
            for e in batch.transcript
        ],
    )


def _write_events(conn: sqlite3.Connection, batch: WriteBatch) -> None:
    if not batch.events:
        return
    conn.executemany(
        "INSERT INTO events (tenant, session_id, sequence, run_id, create_time_us, body_json) VALUES (?,?,?,?,?,?)",
        [
            (batch.tenant, batch.session_id, e.sequence, e.run_id, to_us(e.create_time), codec.EVENT_BODY.dumps(e.body))
            for e in batch.events
        ],
    )


def _write_runs(conn: sqlite3.Connection, batch: WriteBatch) -> None:
    for run in batch.runs:
        conn.execute(
            "INSERT OR REPLACE INTO runs (tenant, session_id, run_id, request_id, status, record_json)"
            " VALUES (?,?,?,?,?,?)",
            (run.tenant, run.session_id, run.run_id, run.request_id, run.status.value, codec.RUN_RECORD.dumps(run)),
        )


def _write_tool_calls(conn: sqlite3.Connection, batch: WriteBatch) -> None:
    if not batch.tool_calls:
        return
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
