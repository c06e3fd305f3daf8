"""Copies the write-ahead log back into the database file on a thread of its own, off the writer's commits.

SQLite's automatic checkpoint runs inside the commit that crosses its threshold (1,000 pages by default): that
commit also copies every page changed since the previous checkpoint into the database file and syncs both files.
Replaying a fresh-session turn workload into a file (bench/README.md has the figures), about one commit in a
hundred took 5–50 ms for it, and the writer spent about 30% more time per transaction than without it.

Here a thread with its own connection runs a PASSIVE checkpoint every CHECKPOINT_SECONDS. A PASSIVE checkpoint
waits for nobody: the writer goes on appending meanwhile and readers go on reading, and a page changed many times
within the interval is copied once. The writer keeps SQLite's automatic checkpoint as a backstop, at
WRITER_AUTOCHECKPOINT_PAGES, for a write rate this thread does not keep up with (or a reader that keeps the log
from being copied); after a checkpoint, the log file is cut back to WAL_SIZE_LIMIT_BYTES when it grew past it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import sys
import threading
from pathlib import Path

from general_agent_server.store.sqlite.writer_thread import WriterThread

logger = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 1.0
# 40 MB of log at 4 KB pages: reached only when the checkpoint thread falls behind.
WRITER_AUTOCHECKPOINT_PAGES = 10_000
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
# Below the event loop and the writer (nice 0): the scheduler gives them the core first.
CHECKPOINT_NICE = 10


def writer_pragmas() -> tuple[str, ...]:
    """What the write connection sets so that this thread, not its commits, checkpoints."""
    return (
        f"PRAGMA wal_autocheckpoint={WRITER_AUTOCHECKPOINT_PAGES}",
        f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}",
    )


class WalCheckpointer:
    """Life cycle: `start` after the file is in WAL mode and migrated, `stop` before the writer closes.
    `passes` counts the checkpoints run (tests and diagnostics read it)."""

    def __init__(self, path: Path, *, interval: float = CHECKPOINT_SECONDS, busy_timeout_ms: int = 5000) -> None:
        self._path = path
        self._interval = interval
        self._busy_timeout_ms = busy_timeout_ms
        self._thread = WriterThread("sqlite-checkpoint")
        self._conn: sqlite3.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    async def start(self) -> None:
        self._conn = await self._thread.run(self._open)
        self._task = asyncio.create_task(self._loop(), name="sqlite-checkpoint")

    async def stop(self) -> None:
        if self._task is not None:
            # A checkpoint under way runs to its end first (WriterThread tells a cancelled caller afterwards).
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._thread.run(conn.close)
        self._thread.shutdown()

    async def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint now: (busy, frames in the log, frames copied), as SQLite reports them."""
        return await self._thread.run(self._checkpoint)

    def _open(self) -> sqlite3.Connection:
        _lower_this_threads_priority()
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
        return conn

    def _checkpoint(self) -> tuple[int, int, int]:
        conn = self._conn
        if conn is None:
            raise sqlite3.ProgrammingError("the checkpoint connection is closed")
        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.passes += 1
        return int(row[0]), int(row[1]), int(row[2])

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.checkpoint()
            except sqlite3.Error as error:
                # The writer's own automatic checkpoint stays as the backstop; the next pass tries again.
                logger.warning("WAL checkpoint failed: %s", error, extra={"category": "system"})


def _lower_this_threads_priority() -> None:
    """Copying the log competes for the CPU with the event loop and the writer; at a lower priority the scheduler
    runs it in their idle time first. Linux applies a nice value to the thread whose id is given (elsewhere the id
    would name a process, so nothing is done there)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CHECKPOINT_NICE)
