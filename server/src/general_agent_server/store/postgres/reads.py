"""Reads of the PostgreSQL store in its SQL dialect: the ListSessions query, the transcript and event log pages,
checkpoints and idempotency records (the row-to-record mapping is store/rows.py's, shared with SQLite). Strings
order byte-wise (COLLATE "C"), as in SQLite."""

from __future__ import annotations

from typing import Any

import asyncpg

from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.records import IdempotencyRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.port import ListCursor, SessionQuery
from general_agent_server.store.rows import (
    CHECKPOINT_CHAIN_SELECT,
    CHECKPOINT_INFO_SELECT,
    EVENT_SELECT,
    IDEMPOTENCY_SELECT,
    SESSION_SELECT,
    TRANSCRIPT_SELECT,
    checkpoint_chain,
    checkpoint_infos,
    idempotency_record,
    sequenced_events,
    to_us,
    transcript_entries,
)
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointInfo


def list_sessions_query(
    tenant: str, query: SessionQuery, after: ListCursor | None, limit: int
) -> tuple[str, list[Any]]:
    params: list[Any] = [tenant]

    def p(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    clauses = ["tenant=$1"]
    if query.session_key_prefix:
        clauses.append(f"left(session_key, {p(len(query.session_key_prefix))}) = {p(query.session_key_prefix)}")
    if query.mode is not None:
        clauses.append(f"mode={p(query.mode.value)}")
    if query.parent_session_id:
        clauses.append(f"parent_session_id={p(query.parent_session_id)}")
    elif not query.include_children:
        clauses.append("parent_session_id=''")
    for key, value in sorted(query.labels.items()):
        clauses.append(f"(labels_json::jsonb ->> {p(key)}) = {p(value)}")
    if after is not None:
        cursor_us = to_us(after.update_time)
        clauses.append(
            f'(update_time_us < {p(cursor_us)} OR (update_time_us = {p(cursor_us)} AND session_id COLLATE "C" > '
            f"{p(after.session_id)}))"
        )
    where = " AND ".join(clauses)
    order = f'update_time_us DESC, session_id COLLATE "C" ASC LIMIT {p(limit)}'
    return f"{SESSION_SELECT} WHERE {where} ORDER BY {order}", params


async def read_transcript(
    pool: asyncpg.Pool, tenant: str, session_id: str, after_entry_id: int, limit: int
) -> list[TranscriptEntry]:
    found = await pool.fetch(
        TRANSCRIPT_SELECT + " WHERE tenant=$1 AND session_id=$2 AND entry_id>$3 ORDER BY entry_id LIMIT $4",
        *(tenant, session_id, after_entry_id, limit),
    )
    return transcript_entries(found)


async def read_events(
    pool: asyncpg.Pool, tenant: str, session_id: str, after_sequence: int, limit: int
) -> list[SequencedEvent]:
    found = await pool.fetch(
        EVENT_SELECT + " WHERE tenant=$1 AND session_id=$2 AND sequence>$3 ORDER BY sequence LIMIT $4",
        *(tenant, session_id, after_sequence, limit),
    )
    return sequenced_events(session_id, found)


async def get_idempotency(pool: asyncpg.Pool, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None:
    row = await pool.fetchrow(
        IDEMPOTENCY_SELECT + " WHERE tenant=$1 AND rpc=$2 AND request_id=$3",
        *(tenant, rpc, request_id),
    )
    return idempotency_record(tenant, rpc, request_id, row)


async def list_checkpoints(
    pool: asyncpg.Pool, tenant: str, session_id: str, before_position: int, limit: int
) -> list[CheckpointInfo]:
    found = await pool.fetch(
        CHECKPOINT_INFO_SELECT
        + " WHERE tenant=$1 AND session_id=$2 AND ($3=0 OR position<$3) ORDER BY position DESC LIMIT $4",
        *(tenant, session_id, before_position, limit),
    )
    return checkpoint_infos(found)


_DOWN_TO = (
    " WHERE c.tenant=$1 AND c.session_id=$2 AND c.position >="
    " (SELECT position FROM checkpoints WHERE tenant=$1 AND session_id=$2 AND checkpoint_id=$3)"
    " ORDER BY c.position DESC, f.idx"
)


async def load_checkpoints_down_to(
    pool: asyncpg.Pool, tenant: str, session_id: str, checkpoint_id: str
) -> list[Checkpoint]:
    # One statement, so the checkpoints and their files come from one consistent snapshot.
    found = await pool.fetch(
        CHECKPOINT_CHAIN_SELECT + _DOWN_TO,
        *(tenant, session_id, checkpoint_id),
    )
    return checkpoint_chain(found)
