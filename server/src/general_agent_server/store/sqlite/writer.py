"""The single writer of the SQLite file, with group commit.

Every write (batches, and the operations of operations.py and checkpoints.py) goes through the shared
group-commit loop (store/group_commit.py): one queue, one asyncio task, writes committed in queue order.
This module adds the SQLite part: each group commits in one transaction on its own sqlite3 connection.

A small group (at most `INLINE_MAX_ROWS` rows and `INLINE_MAX_CHARS` of message text, no operation that can
touch many: a turn's step) commits on the event loop's thread, in place: its transaction costs less than the two
thread hand-offs around it (bench/README.md has the figures). It takes the write lock without waiting; when
another connection holds it (another worker process), the group goes to the writer thread, which waits up to
`busy_timeout`, so the loop never blocks on a lock. Larger groups (a fork's history, a deletion, a long message,
the groups of a busy server) commit on the writer thread, so the loop goes on serving while they are applied.
The group-commit loop runs one transaction at a time, so the connection is never used by both threads at once."""

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
from general_agent_server.store.sqlite.operations import HookRegistration, InsertSession, Lease, Operation
from general_agent_server.store.sqlite.writer_thread import WriterThread

T = TypeVar("T")

# A group of at most this many rows, whose history messages hold at most this much text, commits on the loop's
# thread (module docstring): a turn's step writes about ten rows; past these the time the loop would stand still
# grows with the group (a 20 MiB user message is encoded and written three times: history, transcript, event).
INLINE_MAX_ROWS = 64
INLINE_MAX_CHARS = 256 * 1024
# Operations that write one row or a handful; any other (a deletion, a purge, a checkpoint's files) goes to the thread.
_SMALL_OPERATIONS = (InsertSession, Lease, HookRegistration)


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
        # The connection's busy timeout now: 0 for a commit in place, `busy_timeout_ms` on the thread.
        self._waits_ms = busy_timeout_ms

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
        if getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return StoreUnavailableError.disk_full()
        if _busy(error):
            return StoreUnavailableError.locked()
        return super()._store_error(error)

    async def _transaction(self, items: list[QueuedWrite[Operation]]) -> None:
        """A small group commits in place unless the write lock is taken; any other group is one hand-off to the
        writer thread (module docstring)."""
        conn = self._conn
        if conn is None:
            raise StoreError("store is not open")
        if _small(items) and self._in_place(conn, items):
            return
        await self._on_thread(self._on_writer_thread, conn, items)

    def _in_place(self, conn: sqlite3.Connection, items: list[QueuedWrite[Operation]]) -> bool:
        """Commits `items` on this thread, or leaves nothing of them applied and answers False when SQLite would
        have to wait for another connection (its write lock, mostly)."""
        self._set_busy_timeout(conn, 0)
        try:
            _transaction(conn, items)
        except sqlite3.OperationalError as error:
            if _busy(error):
                return False
            raise
        return True

    def _on_writer_thread(self, conn: sqlite3.Connection, items: list[QueuedWrite[Operation]]) -> None:
        self._set_busy_timeout(conn, self._busy_timeout_ms)
        _transaction(conn, items)

    def _set_busy_timeout(self, conn: sqlite3.Connection, waits_ms: int) -> None:
        if self._waits_ms != waits_ms:
            conn.execute(f"PRAGMA busy_timeout={int(waits_ms)}")
            self._waits_ms = waits_ms


def _small(items: list[QueuedWrite[Operation]]) -> bool:
    """Few rows, no operation that can touch many, and no large message. A message's text is in its history row
    (user input, tool results, the model's output), so only history content is measured: a step's events and
    transcript entries hold the same text, and a tool's output is capped well below the limit."""
    rows = chars = 0
    for item in items:
        batch, operation = item.batch, item.operation
        if operation is not None and not isinstance(operation, _SMALL_OPERATIONS):
            return False
        if batch.replace_history or batch.clear_transcript:
            return False
        rows += 1 + len(batch.history) + len(batch.transcript) + len(batch.events) + len(batch.runs)
        rows += len(batch.tool_calls)
        if rows > INLINE_MAX_ROWS:
            return False  # before any text is measured: a large group's content is never walked on the loop
        chars += sum(_text_chars(message.content) for message in batch.history)
        if chars > INLINE_MAX_CHARS:
            return False
    return True


def _text_chars(value: object) -> int:
    """The characters of every string in JSON-shaped `value` (content blocks: a few small dicts)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_chars(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_text_chars(v) for v in value)
    return 0


def _busy(error: BaseException) -> bool:
    """SQLite would have to wait for another connection (SQLITE_BUSY or SQLITE_LOCKED, extended codes included)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _transaction(conn: sqlite3.Connection, items: list[QueuedWrite[Operation]]) -> None:
    """Every item in one transaction, or none of them (rolled back on any error)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for item in items:
            apply_write(conn, item.batch, item.operation)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
