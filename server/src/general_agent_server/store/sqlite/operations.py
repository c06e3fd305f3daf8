"""Writes that are not a plain WriteBatch: session insert and delete, leases, event retention and hook
registrations. Each rides the writer queue with an (otherwise empty) batch, so it is ordered with every
other write, and runs first in that batch's transaction. An operation that answers something (was a row
deleted, was the lease taken) keeps the answer on itself for the caller to read once the write returns."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Protocol

from general_agent_server.domain.session import SessionRecord
from general_agent_server.store.port import SessionExistsError, WriteBatch
from general_agent_server.store.rows import config_document, session_columns, to_us


class Operation(Protocol):
    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        """Runs on the writer thread inside the transaction; raising rolls back the whole batch."""
        ...


# The tables whose rows a session owns (deleted with it).
SESSION_TABLES = (
    "session_configs",
    "history",
    "transcript",
    "events",
    "runs",
    "tool_calls",
    "hook_registrations",
    "checkpoints",
    "checkpoint_files",
    "session_commands",
)


@dataclass
class InsertSession:
    record: SessionRecord

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        r = self.record
        try:
            conn.execute(
                "INSERT INTO sessions (tenant, session_id, session_key, mode, parent_session_id, state, labels_json,"
                " runtime_json, last_sequence, sequence_reserved, history_message_count, update_time_us, version,"
                " create_time_us, config_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,'')",
                (*session_columns(r), to_us(r.create_time)),
            )
        except sqlite3.IntegrityError as exc:
            raise SessionExistsError(f"session {r.session_id!r} already exists") from exc
        conn.execute(
            "INSERT OR REPLACE INTO session_configs (tenant, session_id, config_json) VALUES (?,?,?)",
            (r.tenant, r.session_id, config_document(r)),
        )


@dataclass
class DeleteSession:
    deleted: bool = False

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        cur = conn.execute("DELETE FROM sessions WHERE tenant=? AND session_id=?", key)
        self.deleted = cur.rowcount == 1
        for table in SESSION_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE tenant=? AND session_id=?", key)  # noqa: S608


@dataclass
class Lease:
    owner: str
    now_us: int
    expires_us: int
    release: bool = False
    renew: bool = False  # extend only a lease `owner` still holds (expired too, if nobody took it); never take one
    version: int | None = None  # the session's, when the lease was taken or renewed

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        key = (batch.tenant, batch.session_id)
        if self.release:
            conn.execute(
                "UPDATE sessions SET lease_owner='', lease_expires_us=0 WHERE tenant=? AND session_id=?"
                " AND lease_owner=?",
                (*key, self.owner),
            )
            return
        if self.renew:
            row = conn.execute(
                "UPDATE sessions SET lease_expires_us=? WHERE tenant=? AND session_id=? AND lease_owner=?"
                " RETURNING version",
                (self.expires_us, *key, self.owner),
            ).fetchone()
        else:
            row = conn.execute(
                "UPDATE sessions SET lease_owner=?, lease_expires_us=? WHERE tenant=? AND session_id=?"
                " AND (lease_owner='' OR lease_owner=? OR lease_expires_us<?) RETURNING version",
                (self.owner, self.expires_us, *key, self.owner, self.now_us),
            ).fetchone()
        self.version = None if row is None else int(row[0])


@dataclass
class PurgeEvents:
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
class HookRegistration:
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
