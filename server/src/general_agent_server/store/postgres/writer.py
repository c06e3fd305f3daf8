"""The writer of the PostgreSQL store: the shared group-commit loop (store/group_commit.py) with a transaction
on one pooled connection."""

from __future__ import annotations

import asyncpg

from general_agent_server.store.group_commit import GroupCommitLoop, QueuedWrite
from general_agent_server.store.postgres.writes import PgOperation, apply_write


class PgWriter(GroupCommitLoop[PgOperation]):
    """Starts its loop on construction; `stop` commits everything queued and ends it."""

    def __init__(self, pool: asyncpg.Pool, *, flush_interval: float) -> None:
        super().__init__(flush_interval=flush_interval, name="postgres-writer")
        self._pool = pool
        self.start()

    async def _transaction(self, items: list[QueuedWrite[PgOperation]]) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            for item in items:
                await apply_write(conn, item.batch, item.operation)
