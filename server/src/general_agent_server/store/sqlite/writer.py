"""The single writer of the SQLite file, with group commit.

Every write (batches, and the operations of operations.py and checkpoints.py) goes through one queue and
one asyncio task. The task takes what is queued and commits it in one transaction on one dedicated thread
with its own sqlite3 connection: a group commit is one hand-off to that thread, not one per statement.
Buffered writes (durable=False) wait up to `flush_interval` for company unless a durable write arrives,
so a 1,000-delta turn costs a handful of commits, not a thousand. Writes commit in queue order."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from general_agent_server.observability.port import Observer
from general_agent_server.store.port import StoreError, StoreUnavailableError, WriteBatch
from general_agent_server.store.sqlite.batch import apply_write
from general_agent_server.store.sqlite.migrations import migrate
from general_agent_server.store.sqlite.operations import Operation

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class QueuedWrite:
    batch: WriteBatch
    done: asyncio.Future[None] | None
    # Session creation, deletion and leases ride the same queue as batches so they are ordered with
    # them; the operation runs first in the batch's transaction.
    operation: Operation | None = None


class GroupCommitWriter:
    """Owns the write connection, its thread and the queue (see module docstring). Life cycle: `connect`,
    `start`, then `submit` any number of times; `stop` drains the queue, `disconnect` closes the
    connection and `shutdown` ends the thread."""

    def __init__(self, path: Path, *, flush_interval: float, busy_timeout_ms: int) -> None:
        self._path = path
        self._flush_interval = flush_interval
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
        self._queue: asyncio.Queue[QueuedWrite | None] = asyncio.Queue()
        self._urgent = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Told each group commit's latency and size (observability/port.py); None: nobody asks.
        self.observer: Observer | None = None

    # ------------------------------------------------------------------ life cycle
    async def connect(self) -> None:
        """Opens the write connection and migrates the schema (on the writer thread)."""
        self._conn = await self._on_thread(self._open_connection)

    def start(self) -> None:
        self._task = asyncio.create_task(self._write_loop(), name="sqlite-writer")

    async def stop(self) -> None:
        """Commits everything queued, then ends the write loop."""
        if self._task is None:
            return
        await self._queue.put(None)
        self._urgent.set()
        await self._task
        self._task = None

    async def disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._on_thread(conn.close)

    def shutdown(self) -> None:
        self._thread.shutdown(wait=False)

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    def _open_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            migrate(conn, self._path)
        except BaseException:
            conn.close()
            raise
        return conn

    # ------------------------------------------------------------------ writes
    async def submit(self, batch: WriteBatch, *, durable: bool = True, operation: Operation | None = None) -> None:
        """Queues a write; a durable one (every operation is) returns once committed or raises StoreError."""
        if self._task is None:
            raise StoreError("store is not open")
        if not durable and operation is None:
            self._queue.put_nowait(QueuedWrite(batch, None))
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(QueuedWrite(batch, done, operation))
        self._urgent.set()
        await done

    async def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            group = [first]
            if first.done is None and not self._urgent.is_set():
                # Only buffered writes so far: give more a moment to arrive, unless one must commit now.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self._flush_interval)
            self._urgent.clear()
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                group.append(item)
            await self._commit_group(group)
        # Drain anything left so no caller waits forever.
        rest: list[QueuedWrite] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                rest.append(item)
        if rest:
            await self._commit_group(rest)

    async def _commit_group(self, group: list[QueuedWrite]) -> None:
        started = time.perf_counter()
        errors = await self._on_thread(self._commit_group_sync, group)
        if self.observer is not None:
            self.observer.store_commit(time.perf_counter() - started, len(group))
        for item, error in zip(group, errors, strict=True):
            _settle(item, error)

    def _commit_group_sync(self, group: list[QueuedWrite]) -> list[BaseException | None]:
        """Commits a group in one transaction (on the writer thread). On failure each write is retried alone
        so only the failing one reports the error; the writer itself never dies (a locked or failing
        database fails the writes of that moment, and later writes proceed)."""
        conn = self._conn
        if conn is None:
            return [StoreError("store is not open")] * len(group)
        try:
            _transaction(conn, group)
        except Exception as exc:
            if len(group) == 1:
                return [exc]
            errors: list[BaseException | None] = []
            for item in group:
                try:
                    _transaction(conn, [item])
                except Exception as single:
                    errors.append(single)
                else:
                    errors.append(None)
            return errors
        return [None] * len(group)


def _transaction(conn: sqlite3.Connection, items: list[QueuedWrite]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for item in items:
            apply_write(conn, item.batch, item.operation)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


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
        item.done.set_exception(store_error(error))


def store_error(error: BaseException) -> StoreError:
    """The port's error for what SQLite raised: a full disk and a lock held past busy_timeout are conditions
    that clear (StoreUnavailableError), anything else is a failure."""
    if isinstance(error, StoreError):
        return error
    code = getattr(error, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL:
        return StoreUnavailableError.disk_full()
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreUnavailableError.locked()
    return StoreError(str(error))
