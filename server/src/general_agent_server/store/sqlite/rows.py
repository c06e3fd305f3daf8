"""How records map to SQLite rows: timestamps as integer microseconds, the session row (its queryable
columns plus JSON documents) and the ListSessions query."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import aiosqlite

from general_agent_server.domain import codec
from general_agent_server.domain.session import SessionIdentity, SessionMode, SessionRecord, SessionState, Usage
from general_agent_server.store.port import ListCursor, SessionQuery


def to_us(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def from_us(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1_000_000, tz=UTC)


async def fetch_all(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Runs a query and reads all its rows in one hand-off to the connection's thread. The hand-off runs to its
    end even when the caller is cancelled, so no statement is left stepping: a half-read cursor would hold its
    WAL snapshot open and every later read on the connection would see the store as it was then."""
    return list(await conn.execute_fetchall(sql, params))


SESSION_SELECT = (
    "SELECT tenant, session_id, session_key, mode, parent_session_id, state, config_json, runtime_json,"
    " last_sequence, sequence_reserved, history_message_count, create_time_us, update_time_us, version"
    " FROM sessions"
)


def session_columns(record: SessionRecord) -> tuple[Any, ...]:
    """The sessions columns from tenant to version, in table order (create_time_us excluded)."""
    runtime = {
        "active_run_id": record.active_run_id,
        "pending_call_ids": list(record.pending_call_ids),
        "stop_requested": record.stop_requested,
        "usage_snapshot": codec.USAGE_SNAPSHOT.to_jsonable(record.usage_snapshot) if record.usage_snapshot else None,
        "cumulative_usage": codec.USAGE.to_jsonable(record.cumulative_usage),
        "forked_from": codec.FORK_ORIGIN.to_jsonable(record.forked_from) if record.forked_from else None,
        "pending_injections": [codec.CONTENT_PARTS.to_jsonable(parts) for parts in record.pending_injections],
        "last_compaction_us": to_us(record.last_compaction_time) if record.last_compaction_time else None,
        "approved_tools": list(record.approved_tools),
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


def record_from_row(row: sqlite3.Row | tuple[Any, ...]) -> SessionRecord:
    """A SessionRecord from a row of SESSION_SELECT."""
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
        last_compaction_time=from_us(runtime["last_compaction_us"]) if runtime.get("last_compaction_us") else None,
        approved_tools=tuple(runtime.get("approved_tools", ())),
    )


def list_sessions_query(
    tenant: str, query: SessionQuery, after: ListCursor | None, limit: int
) -> tuple[str, list[Any]]:
    """The SELECT (and its parameters) of one ListSessions page."""
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
    sql = SESSION_SELECT + " WHERE " + " AND ".join(clauses) + " ORDER BY update_time_us DESC, session_id ASC LIMIT ?"
    params.append(limit)
    return sql, params
