"""Two processes opening a new state file together (`serve --workers`) both migrate it. Each step reads the schema
version under the write lock, so the second finds the steps done instead of failing on the tables the first
made."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

from general_agent_server.store.port import StoreError
from general_agent_server.store.sqlite.migrations import MIGRATIONS, migrate


class _OtherTriesAtTheFirstVersionRead:
    """A connection that, when the migration first reads the version, lets another connection (which does not
    wait for locks) try to migrate the same file: the moment two workers race at."""

    def __init__(self, conn: sqlite3.Connection, other: sqlite3.Connection, path: Path) -> None:
        self._conn, self._other, self._path = conn, other, path
        self.other_error: Exception | None = None
        self._first = True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "PRAGMA user_version" and self._first:
            self._first = False
            try:
                migrate(self._other, self._path)
            except sqlite3.OperationalError as error:
                self.other_error = error
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_two_connections_migrating_a_new_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = sqlite3.connect(path, isolation_level=None, timeout=0)
    second = sqlite3.connect(path, isolation_level=None)
    racing = _OtherTriesAtTheFirstVersionRead(second, first, path)
    migrate(cast("sqlite3.Connection", racing), path)
    # The version was read under the write lock: the other could not migrate meanwhile.
    assert racing.other_error is not None
    assert "locked" in str(racing.other_error)
    assert not first.in_transaction
    assert _version(second) == len(MIGRATIONS)
    assert not second.in_transaction
    tables = {row[0] for row in second.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "session_configs"} <= tables
    migrate(first, path)  # the later one finds every step done
    assert _version(first) == len(MIGRATIONS)


def test_a_migration_that_fails_for_another_reason_still_raises(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE sessions (x)")  # in the way of migration 1, and nobody migrated the file
    with pytest.raises(sqlite3.OperationalError, match="already exists"):
        migrate(conn, path)
    assert _version(conn) == 0
    assert not conn.in_transaction


def test_a_file_newer_than_this_server_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    with pytest.raises(StoreError, match="newer than this server"):
        migrate(conn, path)
    assert _version(conn) == len(MIGRATIONS) + 1
    assert not conn.in_transaction
