"""The single writer of the SQLite file, with group commit.

Every write (batches, and the operations of operations.py and checkpoints.py) goes through the shared
group-commit loop (store/group_commit.py): one queue, one asyncio task, writes committed in queue order.
This module adds the SQLite part: each group commits in one transaction on one dedicated thread with its own
sqlite3 connection, so a group commit is one hand-off to that thread, not one per statement."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from general_agent_server.store.group_commit import GroupCommitLoop, QueuedWrite
from general_agent_server.store.port import StoreError, StoreUnavailableError
from general_agent_server.store.sqlite.batch import apply_write
from general_agent_server.store.sqlite.checkpointer import writer_pragmas
from general_agent_server.store.sqlite.migrations import migrate
from general_agent_server.store.sqlite.operations import Operation
from general_agent_server.store.sqlite.writer_thread import WriterThread

T = TypeVar("T")


class GroupCommitWriter(GroupCommitLoop[Operation]):
    """Owns the write connection and its thread; the queue and the grouping are the shared loop's
    (store/group_commit.py). Life cycle: `connect`, `start`, then `submit` any number of times; `stop` drains
    the queue, `disconnect` closes the connection and `shutdown` ends the thread."""

    def __init__(self, path: Path, *, flush_interval: float, busy_timeout_ms: int) -> None:
        super().__init__(flush_interval=flush_interval, name="sqlite-writer")
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._thread = WriterThread("sqlite-writer")

    # ------------------------------------------------------------------ life cycle
    async def connect(self) -> None:
        """Opens the write connection and migrates the schema (on the writer thread)."""
        self._conn = await self._on_thread(self._open_connection)

    async def disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._on_thread(conn.close)

    def shutdown(self) -> None:
        self._thread.shutdown()

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._thread.run(fn, *args)

    def _open_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            for pragma in writer_pragmas():  # checkpoints run on their own thread (checkpointer.py)
                conn.execute(pragma)
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            migrate(conn, self._path)
        except BaseException:
            conn.close()
            raise
        return conn

    # ------------------------------------------------------------------ writes
    def _store_error(self, error: BaseException) -> StoreError:
        """A full disk and a lock held past busy_timeout are conditions that clear (StoreUnavailableError);
        anything else is a failure."""
        code = getattr(error, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL:
            return StoreUnavailableError.disk_full()
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return StoreUnavailableError.locked()
        return super()._store_error(error)

    async def _transaction(self, items: list[QueuedWrite[Operation]]) -> None:
        """One group commit is one hand-off to the writer thread."""
        conn = self._conn
        if conn is None:
            raise StoreError("store is not open")
        await self._on_thread(_transaction, conn, items)


def _transaction(conn: sqlite3.Connection, items: list[QueuedWrite[Operation]]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for item in items:
            apply_write(conn, item.batch, item.operation)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
