"""The writer of the PostgreSQL store: the shared group-commit loop (store/group_commit.py) with a transaction
on one pooled connection. The transaction also sends the group's wake-ups (listener.py), which PostgreSQL
delivers at commit. A group that is one step whose statement writes all of it (store/postgres/steps.py) is that
statement alone, its wake-ups inside it, without a transaction block."""

from __future__ import annotations

import asyncpg

from general_agent_server.store.group_commit import GroupCommitLoop, QueuedWrite
from general_agent_server.store.postgres.commands import FinishCommand, PutCommand
from general_agent_server.store.postgres.listener import CHANNEL, NOTIFY_SQL, payloads
from general_agent_server.store.postgres.steps import whole_in_one_statement, write_step
from general_agent_server.store.postgres.writes import PgOperation, apply_write
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
        if len(items) == 1 and items[0].operation is None and whole_in_one_statement(batch := items[0].batch):
            # One statement writes the whole group, wake-ups included: atomic on its own, so no BEGIN and COMMIT
            # (a text turn's groups are this: three round trips fewer each).
            assert batch.session is not None  # whole_in_one_statement
            async with self._pool.acquire() as conn:
                await write_step(conn, batch.session, batch, wakeups=(CHANNEL, wakeups) if wakeups else None)
            return
        async with self._pool.acquire() as conn, conn.transaction():
            for item in items:
                await apply_write(conn, item.batch, item.operation)
            if wakeups:
                await conn.execute(NOTIFY_SQL, CHANNEL, wakeups)
