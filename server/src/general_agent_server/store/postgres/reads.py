"""Reads of the PostgreSQL store that map rows to records: the ListSessions query, the transcript and event log
pages, checkpoints and idempotency records. Strings order byte-wise (COLLATE "C"), as in SQLite."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from general_agent_server.domain import codec
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.records import IdempotencyRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.port import ListCursor, SessionQuery
from general_agent_server.store.sqlite.rows import SESSION_SELECT, from_us, to_us
from general_agent_server.workspace.checkpoints.files import CheckpointFile
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
    rows = await pool.fetch(
        "SELECT entry_id, sequence, run_id, timestamp_us, entry_json FROM transcript"
        " WHERE tenant=$1 AND session_id=$2 AND entry_id>$3 ORDER BY entry_id LIMIT $4",
        *(tenant, session_id, after_entry_id, limit),
    )
    return [
        TranscriptEntry(
            entry_id=r[0], sequence=r[1], run_id=r[2], timestamp=from_us(r[3]), body=codec.TRANSCRIPT_BODY.loads(r[4])
        )
        for r in rows
    ]


async def read_events(
    pool: asyncpg.Pool, tenant: str, session_id: str, after_sequence: int, limit: int
) -> list[SequencedEvent]:
    rows = await pool.fetch(
        "SELECT sequence, run_id, create_time_us, body_json FROM events"
        " WHERE tenant=$1 AND session_id=$2 AND sequence>$3 ORDER BY sequence LIMIT $4",
        *(tenant, session_id, after_sequence, limit),
    )
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


async def get_idempotency(pool: asyncpg.Pool, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None:
    row = await pool.fetchrow(
        "SELECT body_hash, result_json, create_time_us FROM idempotency WHERE tenant=$1 AND rpc=$2 AND request_id=$3",
        *(tenant, rpc, request_id),
    )
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


async def list_checkpoints(
    pool: asyncpg.Pool, tenant: str, session_id: str, before_position: int, limit: int
) -> list[CheckpointInfo]:
    rows = await pool.fetch(
        "SELECT position, checkpoint_id, run_id, call_id, tool_name, create_time_us, paths_json, stored_bytes"
        " FROM checkpoints WHERE tenant=$1 AND session_id=$2 AND ($3=0 OR position<$3) ORDER BY position DESC LIMIT $4",
        *(tenant, session_id, before_position, limit),
    )
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


async def load_checkpoints_down_to(
    pool: asyncpg.Pool, tenant: str, session_id: str, checkpoint_id: str
) -> list[Checkpoint]:
    # One statement, so the checkpoints and their files come from one consistent snapshot.
    rows = await pool.fetch(
        "SELECT c.checkpoint_id, c.run_id, c.call_id, c.tool_name, c.create_time_us,"
        " f.path, f.existed_before, f.content"
        " FROM checkpoints c LEFT JOIN checkpoint_files f"
        " ON f.tenant=c.tenant AND f.session_id=c.session_id AND f.checkpoint_id=c.checkpoint_id"
        " WHERE c.tenant=$1 AND c.session_id=$2 AND c.position >="
        " (SELECT position FROM checkpoints WHERE tenant=$1 AND session_id=$2 AND checkpoint_id=$3)"
        " ORDER BY c.position DESC, f.idx",
        *(tenant, session_id, checkpoint_id),
    )
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
