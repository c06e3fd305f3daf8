"""The writer of the PostgreSQL store: one queue and one task, so writes commit in the order they were made (the
BatchWriter contract), grouped into one transaction on one connection. A group that fails is retried write by
write, so only the failing write reports its error; buffered writes (durable=False) wait `flush_interval` for
company unless a durable one arrives."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import asyncpg

from general_agent_server.observability.port import Observer
from general_agent_server.store.port import StoreError, WriteBatch
from general_agent_server.store.postgres.writes import PgOperation, apply_write

logger = logging.getLogger(__name__)


@dataclass
class QueuedWrite:
    batch: WriteBatch
    done: asyncio.Future[None] | None
    operation: PgOperation | None = None


class PgWriter:
    def __init__(self, pool: asyncpg.Pool, *, flush_interval: float) -> None:
        self._pool = pool
        self._flush_interval = flush_interval
        self._queue: asyncio.Queue[QueuedWrite | None] = asyncio.Queue()
        self._urgent = asyncio.Event()
        self.observer: Observer | None = None
        self._task: asyncio.Task[None] | None = asyncio.create_task(self._loop(), name="postgres-writer")

    async def stop(self) -> None:
        """Commits everything queued, then ends the loop."""
        if self._task is None:
            return
        await self._queue.put(None)
        self._urgent.set()
        await self._task
        self._task = None

    async def submit(self, batch: WriteBatch, *, durable: bool = True, operation: PgOperation | None = None) -> None:
        if self._task is None:
            raise StoreError("store is not open")
        if not durable and operation is None:
            self._queue.put_nowait(QueuedWrite(batch, None))
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(QueuedWrite(batch, done, operation))
        self._urgent.set()
        await done

    async def _loop(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            group = [first]
            if first.done is None and not self._urgent.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self._flush_interval)
            self._urgent.clear()
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                group.append(item)
            await self._commit(group)
        rest = [item for item in iter_queue(self._queue) if item is not None]
        if rest:
            await self._commit(rest)

    async def _commit(self, group: list[QueuedWrite]) -> None:
        started = time.perf_counter()
        try:
            await self._transaction(group)
            errors: list[BaseException | None] = [None] * len(group)
            if self.observer is not None:
                self.observer.store_commit(time.perf_counter() - started, len(group))
        except Exception as exc:
            if len(group) == 1:
                errors = [exc]
            else:
                errors = []
                for item in group:
                    try:
                        await self._transaction([item])
                    except Exception as single:
                        errors.append(single)
                    else:
                        errors.append(None)
        for item, error in zip(group, errors, strict=True):
            _settle(item, error)

    async def _transaction(self, items: list[QueuedWrite]) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            for item in items:
                await apply_write(conn, item.batch, item.operation)


def iter_queue(queue: asyncio.Queue[QueuedWrite | None]) -> list[QueuedWrite | None]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def _settle(item: QueuedWrite, error: BaseException | None) -> None:
    if item.done is None:
        if error is not None:
            logger.error("buffered write failed: %s", error, extra={"category": "system"})
        return
    if item.done.done():
        return
    if error is None:
        item.done.set_result(None)
    else:
        item.done.set_exception(error if isinstance(error, StoreError) else StoreError(str(error)))
