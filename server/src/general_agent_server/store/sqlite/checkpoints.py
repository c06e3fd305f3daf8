"""File checkpoints in SQLite: the bounded insert and the delete (writer operations) and the two reads.

`checkpoints.position` (AUTOINCREMENT, never reused) orders a session's checkpoints; the prior file contents
live in `checkpoint_files`, so listing never reads them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiosqlite

from general_agent_server.store.port import WriteBatch
from general_agent_server.store.rows import (
    CHECKPOINT_CHAIN_SELECT,
    CHECKPOINT_INFO_SELECT,
    checkpoint_chain,
    checkpoint_infos,
    to_us,
)
from general_agent_server.store.sqlite.rows import fetch_all
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointInfo


def _delete_checkpoint_rows(conn: sqlite3.Connection, key: tuple[str, str], checkpoint_ids: Sequence[str]) -> None:
    rows = [(*key, cid) for cid in checkpoint_ids]
    conn.executemany("DELETE FROM checkpoint_files WHERE tenant=? AND session_id=? AND checkpoint_id=?", rows)
    conn.executemany("DELETE FROM checkpoints WHERE tenant=? AND session_id=? AND checkpoint_id=?", rows)


@dataclass
class AddCheckpoint:
    checkpoint: Checkpoint
    max_count: int
    max_bytes: int
    dropped: list[str] = field(default_factory=list)

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        # A group that fails runs each of its writes again alone: start over, or ids would be reported twice.
        self.dropped = []
        key = (batch.tenant, batch.session_id)
        if conn.execute("SELECT 1 FROM sessions WHERE tenant=? AND session_id=?", key).fetchone() is None:
            return
        self._insert(conn, key)
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

    def _insert(self, conn: sqlite3.Connection, key: tuple[str, str]) -> None:
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


@dataclass
class DeleteCheckpoints:
    checkpoint_ids: list[str]

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        _delete_checkpoint_rows(conn, (batch.tenant, batch.session_id), self.checkpoint_ids)


async def list_checkpoints(
    conn: aiosqlite.Connection, tenant: str, session_id: str, *, before_position: int, limit: int
) -> list[CheckpointInfo]:
    found = await fetch_all(
        conn,
        CHECKPOINT_INFO_SELECT
        + " WHERE tenant=? AND session_id=? AND (?=0 OR position<?) ORDER BY position DESC LIMIT ?",
        (tenant, session_id, before_position, before_position, limit),
    )
    return checkpoint_infos(found)


_DOWN_TO = (
    " WHERE c.tenant=? AND c.session_id=? AND c.position >="
    " (SELECT position FROM checkpoints WHERE tenant=? AND session_id=? AND checkpoint_id=?)"
    " ORDER BY c.position DESC, f.idx"
)


async def load_checkpoints_down_to(
    conn: aiosqlite.Connection, tenant: str, session_id: str, checkpoint_id: str
) -> list[Checkpoint]:
    # One statement, so the checkpoints and their files come from one consistent snapshot.
    found = await fetch_all(
        conn,
        CHECKPOINT_CHAIN_SELECT + _DOWN_TO,
        (tenant, session_id, tenant, session_id, checkpoint_id),
    )
    return checkpoint_chain(found)
