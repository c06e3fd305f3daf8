"""Queries of the SQLite store that run on a timer, whatever the load, are answered from an index: their cost must
not grow with the number of sessions in the file. Checked with SQLite's own query plan on the real schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from general_agent_server.store.sqlite.commands import CLAIM_SQL
from general_agent_server.store.sqlite.migrations import migrate


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    path = tmp_path / "plans.sqlite3"
    connection = sqlite3.connect(path, isolation_level=None)
    migrate(connection, path)
    return connection


def plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> list[str]:
    return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def test_the_relay_claim_reads_pending_commands_not_every_session(conn: sqlite3.Connection) -> None:
    # sessions/relay.py claims every poll while this replica holds any lease.
    steps = plan(conn, CLAIM_SQL, ("replica-a", 0))
    assert any("session_commands_pending" in step for step in steps), steps
    assert not any(step.startswith("SCAN s") and "session_commands" not in step for step in steps), steps
    assert any("SEARCH s USING PRIMARY KEY" in step for step in steps), steps


def test_the_check_sees_a_scan_of_the_sessions(conn: sqlite3.Connection) -> None:
    # The form the claim had: an IN over the sessions holding the lease, which reads the whole sessions table.
    scanning = (
        "UPDATE session_commands SET status='CLAIMED' WHERE status='PENDING' AND (tenant, session_id) IN"
        " (SELECT tenant, session_id FROM sessions WHERE lease_owner=? AND lease_expires_us>=?)"
    )
    assert "SCAN sessions" in plan(conn, scanning, ("replica-a", 0))
