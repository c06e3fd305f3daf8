"""A session step writes its row once: the lease the step takes (a run starting) or releases (a run ending) is
written by the step's own compare-and-set UPDATE, not by UPDATEs of its own (bench/README.md has the figures),
and its config's row only when the step may have changed it. The conformance suite checks what is stored and
refused; this checks how many statements store it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from general_agent_server.domain.session import SessionRecord
from general_agent_server.store.group_commit import QueuedWrite
from general_agent_server.store.port import VersionConflictError, WriteBatch
from general_agent_server.store.sqlite.migrations import migrate
from general_agent_server.store.sqlite.operations import InsertSession, Operation
from general_agent_server.store.sqlite.writer import _transaction
from general_agent_server.store.testing.factories import bump, make_event, make_session

TENANT, SID = "t", "s1"


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "group.sqlite3"
    connection = sqlite3.connect(path, isolation_level=None)
    migrate(connection, path)
    yield connection
    connection.close()


def stored(conn: sqlite3.Connection) -> SessionRecord:
    record = make_session(TENANT, SID)
    InsertSession(record).run(conn, WriteBatch(tenant=TENANT, session_id=SID))
    return record


def updates(conn: sqlite3.Connection, batch: WriteBatch, table: str = "sessions") -> int:
    """The UPDATEs of `table` one group of `batch` executes."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        _transaction(conn, [QueuedWrite[Operation](batch, None)])
    finally:
        conn.set_trace_callback(None)
    return sum(1 for s in statements if s.startswith(f"UPDATE {table} "))


def lease(conn: sqlite3.Connection) -> tuple[str, bool]:
    owner, expires = conn.execute("SELECT lease_owner, lease_expires_us FROM sessions").fetchone()
    return owner, expires > 0


def test_a_step_takes_and_releases_the_lease_in_its_own_update(conn: sqlite3.Connection) -> None:
    record = stored(conn)
    start = bump(record)
    taking = WriteBatch(
        tenant=TENANT, session_id=SID, session=start, events=[make_event(SID, 1)], take_lease="a", lease_ttl_seconds=30
    )
    assert updates(conn, taking) == 1
    assert lease(conn) == ("a", True)
    # Another owner's take over a live lease writes nothing, and says why.
    other = WriteBatch(tenant=TENANT, session_id=SID, session=bump(start), take_lease="b", lease_ttl_seconds=30)
    with pytest.raises(VersionConflictError, match="another owner holds its lease"):
        updates(conn, other)
    assert conn.execute("SELECT version FROM sessions").fetchone() == (start.version,)
    # A release by another owner leaves the lease alone; the owner's frees it.
    foreign = WriteBatch(tenant=TENANT, session_id=SID, session=bump(start), release_lease="b")
    assert updates(conn, foreign) == 1
    assert lease(conn) == ("a", True)
    ending = WriteBatch(tenant=TENANT, session_id=SID, session=bump(bump(start)))
    ending.release_lease = "a"
    assert updates(conn, ending) == 1
    assert lease(conn) == ("", False)


def test_a_step_whose_config_is_as_stored_leaves_the_config_row_alone(conn: sqlite3.Connection) -> None:
    record = stored(conn)
    step = bump(record)
    assert updates(conn, WriteBatch(tenant=TENANT, session_id=SID, session=step), "session_configs") == 1
    # Told the config is as stored, the step does not write it: shown here by a config it would otherwise store.
    prompt = replace(step.config, system_prompt="not written")
    unchanged = bump(step, config=prompt)
    batch = WriteBatch(tenant=TENANT, session_id=SID, session=unchanged, config_unchanged=True)
    assert updates(conn, batch, "session_configs") == 0
    assert conn.execute("SELECT version FROM sessions").fetchone() == (unchanged.version,)
    assert "not written" not in conn.execute("SELECT config_json FROM session_configs").fetchone()[0]
