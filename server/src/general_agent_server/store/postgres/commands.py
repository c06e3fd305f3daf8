"""The relayed session commands of the PostgreSQL store (store/port.py, CommandStore); the same table as the
SQLite store's. Writes ride the writer queue as operations, ordered with every other write."""

from __future__ import annotations

from dataclasses import dataclass, field

from general_agent_server.store.port import CommandStatus, SessionCommand, WriteBatch
from general_agent_server.store.postgres.schema import Conn
from general_agent_server.store.sqlite.commands import now_us


@dataclass
class PutCommand:
    command: SessionCommand

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        c = self.command
        await conn.execute(
            "INSERT INTO session_commands (tenant, command_id, session_id, status, body_json, create_time_us)"
            " VALUES ($1,$2,$3,$4,$5,$6)",
            c.tenant,
            c.command_id,
            c.session_id,
            CommandStatus.PENDING.value,
            c.body_json,
            now_us(),
        )


@dataclass
class ClaimCommands:
    owner: str
    claimed: list[SessionCommand] = field(default_factory=list)

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        rows = await conn.fetch(
            "UPDATE session_commands c SET status='CLAIMED' FROM sessions s WHERE c.status='PENDING'"
            " AND s.tenant=c.tenant AND s.session_id=c.session_id AND s.lease_owner=$1 AND s.lease_expires_us>=$2"
            " RETURNING c.tenant, c.session_id, c.command_id, c.body_json",
            self.owner,
            now_us(),
        )
        self.claimed = [
            SessionCommand(tenant=r[0], session_id=r[1], command_id=r[2], body_json=r[3], status=CommandStatus.CLAIMED)
            for r in rows
        ]


@dataclass
class FinishCommand:
    command_id: str
    result_json: str

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        await conn.execute(
            "UPDATE session_commands SET status='DONE', result_json=$1 WHERE tenant=$2 AND command_id=$3",
            self.result_json,
            batch.tenant,
            self.command_id,
        )


@dataclass
class DeleteCommand:
    command_id: str
    only_pending: bool
    deleted: bool = False

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        sql = "DELETE FROM session_commands WHERE tenant=$1 AND command_id=$2"
        if self.only_pending:
            sql += " AND status='PENDING'"
        self.deleted = await conn.execute(sql, batch.tenant, self.command_id) == "DELETE 1"


COMMAND_SELECT = (
    "SELECT session_id, status, body_json, result_json FROM session_commands WHERE tenant=$1 AND command_id=$2"
)
LEASE_SELECT = (
    "SELECT lease_owner FROM sessions WHERE tenant=$1 AND session_id=$2 AND lease_owner!='' AND lease_expires_us>=$3"
)

# Answered or claimed commands their sender never collected (a live sender deletes the answer it reads), and
# commands of sessions that are gone.
PURGE_SQL = (
    "DELETE FROM session_commands WHERE (status!='PENDING' AND create_time_us<$1) OR NOT EXISTS"
    " (SELECT 1 FROM sessions s WHERE s.tenant=session_commands.tenant AND s.session_id=session_commands.session_id)"
)


@dataclass
class PurgeCommands:
    older_than_us: int
    purged: int = 0

    async def run(self, conn: Conn, batch: WriteBatch) -> None:
        self.purged = int((await conn.execute(PURGE_SQL, self.older_than_us)).split()[-1])
