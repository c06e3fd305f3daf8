"""Where the SQLite store commits a group (store/sqlite/writer.py): a small one (a turn's step) on the event loop's
thread, in place; a large one, and one that meets another connection's write lock, on the writer thread, so the
loop never waits for a lock or for a long transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionRecord
from general_agent_server.store.port import WriteBatch
from general_agent_server.store.sqlite.store import SqliteSessionStore
from general_agent_server.store.sqlite.writer import INLINE_MAX_CHARS, INLINE_MAX_ROWS
from general_agent_server.store.testing.factories import bump, make_event, make_session

TENANT, SID = "t", "s1"
BUSY_TIMEOUT_S = 30


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteSessionStore]:
    opened = SqliteSessionStore(tmp_path / "state.sqlite3", flush_interval=0.001, busy_timeout_ms=BUSY_TIMEOUT_S * 1000)
    await opened.open()
    yield opened
    await opened.close()


def committing_threads(store: SqliteSessionStore) -> set[int]:
    """The threads that run the writer connection's COMMITs from now on."""
    threads: set[int] = set()
    conn = store._writer._conn
    assert conn is not None

    def trace(statement: str) -> None:
        if statement == "COMMIT":
            threads.add(threading.get_ident())

    conn.set_trace_callback(trace)
    return threads


async def writer_thread(store: SqliteSessionStore) -> int:
    return await store._writer._thread.run(threading.get_ident)


def step(stored: SessionRecord, events: int, first: int = 1) -> WriteBatch:
    """The next step of a session: its record's next version and `events` events."""
    record = bump(stored)
    return WriteBatch(
        tenant=TENANT,
        session_id=SID,
        session=record,
        events=[make_event(SID, first + i) for i in range(events)],
    )


async def test_a_turns_step_commits_on_the_loops_thread(store: SqliteSessionStore) -> None:
    record = make_session(TENANT, SID)
    threads = committing_threads(store)
    await store.create_session(record)
    batch = step(record, events=5)
    await store.write(batch)
    assert threads == {threading.get_ident()}
    stored = await store.get_session(TENANT, SID)
    assert stored is not None
    assert stored.version == record.version + 1
    assert [e.sequence for e in await store.read_events(TENANT, SID, after_sequence=0, limit=1000)] == [1, 2, 3, 4, 5]


async def test_a_large_group_commits_on_the_writer_thread(store: SqliteSessionStore) -> None:
    record = make_session(TENANT, SID)
    await store.create_session(record)
    threads = committing_threads(store)
    await store.write(step(record, events=INLINE_MAX_ROWS))
    assert threads == {await writer_thread(store)} != {threading.get_ident()}
    assert len(await store.read_events(TENANT, SID, after_sequence=0, limit=1000)) == INLINE_MAX_ROWS


async def test_a_long_message_commits_on_the_writer_thread(store: SqliteSessionStore) -> None:
    record = make_session(TENANT, SID)
    await store.create_session(record)
    threads = committing_threads(store)
    long = HistoryMessage(role="user", content=({"type": "text", "text": "x" * (INLINE_MAX_CHARS + 1)},))
    short = HistoryMessage(role="user", content=({"type": "text", "text": "x" * (INLINE_MAX_CHARS // 2)},))
    await store.write(WriteBatch(tenant=TENANT, session_id=SID, session=bump(record), history=[long]))
    assert threads == {await writer_thread(store)}
    threads.clear()
    stored = await store.get_session(TENANT, SID)
    assert stored is not None
    await store.write(WriteBatch(tenant=TENANT, session_id=SID, session=bump(stored), history=[short], history_base=1))
    assert threads == {threading.get_ident()}
    assert [m.content for m in await store.load_history(TENANT, SID)] == [long.content, short.content]


async def test_a_lock_held_elsewhere_leaves_the_loop_free_and_the_write_lands_after_it(
    store: SqliteSessionStore,
) -> None:
    record = make_session(TENANT, SID)
    await store.create_session(record)
    threads = committing_threads(store)
    holder = sqlite3.connect(store.path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        write = asyncio.create_task(store.write(step(record, events=2)))
        for _ in range(20):
            await asyncio.sleep(0)
        # Had the write waited for the lock on this thread, this line would run only after the 30 s busy timeout.
        assert time.monotonic() - started < BUSY_TIMEOUT_S / 3
        assert not write.done()
        holder.execute("ROLLBACK")
        await write
    finally:
        holder.close()
    assert threads == {await writer_thread(store)}
    stored = await store.get_session(TENANT, SID)
    assert stored is not None
    assert stored.version == record.version + 1
    # Back to committing in place once the lock is free.
    threads.clear()
    await store.write(step(stored, events=1, first=3))
    assert threads == {threading.get_ident()}
