"""The private SQLite files of memory (the local backend's store, the capture outbox): opened on first use, 0600
in a 0700 directory, and used from worker threads one piece of work at a time."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def open_private(path: Path) -> sqlite3.Connection:
    """A WAL database in a 0700 directory, its files 0600 (memories are as private as the transcripts)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    for suffix in ("", "-wal", "-shm"):
        target = Path(f"{path}{suffix}")
        if not target.exists():
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(target, 0o600)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=5.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA secure_delete=ON")
    db.execute("PRAGMA busy_timeout=5000")
    return db


class PrivateDb:
    """One file opened with open_private, then `setup` (the schema), at its first use."""

    def __init__(self, path: Path, setup: Callable[[sqlite3.Connection], object]) -> None:
        self._path = path
        self._setup = setup
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            db = open_private(self._path)
            self._setup(db)
            self._db = db
        return self._db

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` on a worker thread, alone on the connection."""

        def locked() -> T:
            with self._lock:
                return work(self._connection())

        return await asyncio.to_thread(locked)

    async def aclose(self) -> None:
        def close() -> None:
            with self._lock:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        if self._db is not None:  # never opened: no thread to start for nothing
            await asyncio.to_thread(close)
