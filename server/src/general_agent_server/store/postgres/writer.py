"""The writer of the PostgreSQL store: the shared group-commit loop (store/group_commit.py) with a transaction
on one pooled connection. The transaction also sends the group's wake-ups (listener.py), which PostgreSQL
delivers at commit. A group of one write that is one statement (a step whose statement writes all of it,
store/postgres/steps.py, its wake-ups inside it; a session's creation) is that statement alone, without a
transaction block."""

from __future__ import annotations

import asyncpg

from general_agent_server.store.group_commit import GroupCommitLoop, QueuedWrite
from general_agent_server.store.port import WriteBatch
from general_agent_server.store.postgres.commands import FinishCommand, PutCommand
from general_agent_server.store.postgres.listener import CHANNEL, NOTIFY_SQL, payloads
from general_agent_server.store.postgres.steps import whole_in_one_statement, write_step
from general_agent_server.store.postgres.writes import InsertSession, PgOperation, apply_write
from general_agent_server.store.wakeups import answer_topic, commands_topic, events_topic


def _topics(item: QueuedWrite[PgOperation]) -> list[str]:
    batch, operation = item.batch, item.operation
    topics = [f"{events_topic(batch.tenant, batch.session_id)}\t{batch.events[-1].sequence}"] if batch.events else []
    if isinstance(operation, PutCommand):
        topics.append(commands_topic())
    elif isinstance(operation, FinishCommand):
        topics.append(answer_topic(batch.tenant, operation.command_id))
    return topics


class PgWriter(GroupCommitLoop[PgOperation]):
    """Starts its loop on construction; `stop` commits everything queued and ends it. With `notify` off the
    writer sends no wake-ups (other replicas then find commits by polling)."""

    def __init__(self, pool: asyncpg.Pool, *, flush_interval: float, notify: bool = True) -> None:
        super().__init__(flush_interval=flush_interval, name="postgres-writer")
        self._pool = pool
        self._notify = notify
        self.start()

    async def _transaction(self, items: list[QueuedWrite[PgOperation]]) -> None:
        wakeups = payloads(t for item in items for t in _topics(item)) if self._notify else []
        if len(items) == 1 and await self._alone(items[0], wakeups):
            return
        async with self._pool.acquire() as conn, conn.transaction():
            for item in items:
                await apply_write(conn, item.batch, item.operation)
            if wakeups:
                await conn.execute(NOTIFY_SQL, CHANNEL, wakeups)

    async def _alone(self, item: QueuedWrite[PgOperation], wakeups: list[str]) -> bool:
        """Writes a group of one write that is one statement, atomic on its own, so without BEGIN and COMMIT: a
        step its statement takes whole, wake-ups included (a text turn's groups: three round trips fewer each),
        or a session's creation with nothing beside it. False, having written nothing, for any other write."""
        batch, operation = item.batch, item.operation
        if operation is None and batch.session is not None and whole_in_one_statement(batch):
            async with self._pool.acquire() as conn:
                await write_step(conn, batch.session, batch, wakeups=(CHANNEL, wakeups) if wakeups else None)
            return True
        if isinstance(operation, InsertSession) and not wakeups and batch == _bare(batch):
            async with self._pool.acquire() as conn:
                await operation.run(conn, batch)
            return True
        return False


def _bare(batch: WriteBatch) -> WriteBatch:
    return WriteBatch(tenant=batch.tenant, session_id=batch.session_id)
