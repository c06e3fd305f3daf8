"""The relayed session commands of the SQLite store (store/port.py, CommandStore): writes ride the writer queue
as operations, so they are ordered with every other write."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from general_agent_server.store.port import CommandStatus, SessionCommand, WriteBatch
from general_agent_server.store.rows import command_from_row, now_us

__all__ = ["command_from_row", "now_us"]


@dataclass
class PutCommand:
    command: SessionCommand

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        c = self.command
        conn.execute(
            "INSERT INTO session_commands (tenant, command_id, session_id, status, body_json, create_time_us)"
            " VALUES (?,?,?,?,?,?)",
            (c.tenant, c.command_id, c.session_id, CommandStatus.PENDING.value, c.body_json, now_us()),
        )


# Driven by the pending commands (a partial index, nearly always empty) with one key lookup of each one's session:
# the relay runs this every poll while the replica holds any lease, so it must not read every session (an `IN`
# over the sessions holding this replica's lease scans the sessions table, there being no index on lease_owner).
CLAIM_SQL = (
    "UPDATE session_commands SET status='CLAIMED' WHERE status='PENDING' AND EXISTS (SELECT 1 FROM sessions s"
    " WHERE s.tenant=session_commands.tenant AND s.session_id=session_commands.session_id AND s.lease_owner=?"
    " AND s.lease_expires_us>=?) RETURNING tenant, session_id, command_id, body_json"
)


@dataclass
class ClaimCommands:
    owner: str
    claimed: list[SessionCommand] = field(default_factory=list)

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        rows = conn.execute(CLAIM_SQL, (self.owner, now_us())).fetchall()
        self.claimed = [
            SessionCommand(tenant=r[0], session_id=r[1], command_id=r[2], body_json=r[3], status=CommandStatus.CLAIMED)
            for r in rows
        ]


@dataclass
class FinishCommand:
    command_id: str
    result_json: str

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        conn.execute(
            "UPDATE session_commands SET status='DONE', result_json=? WHERE tenant=? AND command_id=?",
            (self.result_json, batch.tenant, self.command_id),
        )


@dataclass
class DeleteCommand:
    command_id: str
    only_pending: bool
    deleted: bool = False

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        sql = "DELETE FROM session_commands WHERE tenant=? AND command_id=?"
        if self.only_pending:
            sql += " AND status='PENDING'"
        self.deleted = conn.execute(sql, (batch.tenant, self.command_id)).rowcount > 0


COMMAND_SELECT = (
    "SELECT session_id, status, body_json, result_json FROM session_commands WHERE tenant=? AND command_id=?"
)
LEASE_SELECT = (
    "SELECT lease_owner FROM sessions WHERE tenant=? AND session_id=? AND lease_owner!='' AND lease_expires_us>=?"
)

# Answered or claimed commands their sender never collected (a live sender deletes the answer it reads), and
# commands of sessions that are gone.
PURGE_SQL = (
    "DELETE FROM session_commands WHERE (status!='PENDING' AND create_time_us<?) OR NOT EXISTS"
    " (SELECT 1 FROM sessions s WHERE s.tenant=session_commands.tenant AND s.session_id=session_commands.session_id)"
)


@dataclass
class PurgeCommands:
    older_than_us: int
    purged: int = 0

    def run(self, conn: sqlite3.Connection, batch: WriteBatch) -> None:
        self.purged = conn.execute(PURGE_SQL, (self.older_than_us,)).rowcount
