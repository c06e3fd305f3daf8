"""Two processes opening a new state file together (`serve --workers`) both read schema version 0; the one that
takes the write lock second finds the tables made. It must go on from the version it then reads, not fail."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

from general_agent_server.store.sqlite.migrations import MIGRATIONS, migrate


class _MigratedByAnotherAfterItsRead:
    """A connection whose first version read answers what the file held, and then lets another connection migrate
    the whole file before the caller goes on: the race of two workers starting at once, made certain."""

    def __init__(self, conn: sqlite3.Connection, other: sqlite3.Connection, path: Path) -> None:
        self._conn, self._other, self._path = conn, other, path
        self._first = True

    def execute(self, sql: str, *args: Any) -> Any:
        cursor = self._conn.execute(sql, *args)
        if sql == "PRAGMA user_version" and self._first:
            self._first = False
            seen = cursor.fetchall()
            migrate(self._other, self._path)
            return _Rows(seen)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_a_file_migrated_by_another_process_after_the_version_was_read_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = sqlite3.connect(path, isolation_level=None)
    second = sqlite3.connect(path, isolation_level=None)
    racing = _MigratedByAnotherAfterItsRead(second, first, path)
    migrate(cast("sqlite3.Connection", racing), path)
    assert _version(second) == len(MIGRATIONS)
    assert not second.in_transaction
    tables = {row[0] for row in second.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "session_configs"} <= tables


def test_a_migration_that_fails_for_another_reason_still_raises(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE sessions (x)")  # in the way of migration 1, and nobody migrated the file
    with pytest.raises(sqlite3.OperationalError, match="already exists"):
        migrate(conn, path)
    assert _version(conn) == 0
    assert not conn.in_transaction
