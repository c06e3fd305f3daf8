"""SQLite's side of reading rows: the one-hand-off read and the ListSessions query in SQLite's dialect (the
row-to-record mapping both stores share is store/rows.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from general_agent_server.store.port import ListCursor, SessionQuery
from general_agent_server.store.rows import SESSION_SELECT, to_us


async def fetch_all(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Runs a query and reads all its rows in one hand-off to the connection's thread. The hand-off runs to its
    end even when the caller is cancelled, so no statement is left stepping: a half-read cursor would hold its
    WAL snapshot open and every later read on the connection would see the store as it was then."""
    return list(await conn.execute_fetchall(sql, params))


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
