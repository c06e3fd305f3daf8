"""The SQLite store's write-ahead log is copied back into the database file by a thread of its own
(store/sqlite/checkpointer.py), not by the commit that crosses SQLite's default 1,000-page threshold; the thread's
PASSIVE checkpoints copy everything committed, at a lower priority than the event loop and the writer, and closing
the store ends the thread."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from general_agent_server.store.sqlite.checkpointer import CHECKPOINT_NICE, WRITER_AUTOCHECKPOINT_PAGES
from general_agent_server.store.sqlite.store import SqliteSessionStore
from general_agent_server.store.testing.factories import make_session

# Enough sessions that their commits append well over SQLite's default 1,000 log frames.
SESSIONS = 600


async def _create(store: SqliteSessionStore, count: int) -> None:
    for i in range(count):  # one commit each
        await store.create_session(make_session("t", f"s{i}"))


async def test_commits_do_not_checkpoint_at_sqlites_default_threshold(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "state.sqlite3", flush_interval=0.001, checkpoint_interval=3600)
    await store.open()
    try:
        await _create(store, SESSIONS)
        busy, logged, copied = await store.checkpointer.checkpoint()
        # Every frame since the file was made is still in the log: no commit checkpointed (and restarted it).
        assert busy == 0
        assert 1000 < logged < WRITER_AUTOCHECKPOINT_PAGES
        assert copied == logged
        assert await store.get_session("t", "s0") is not None
    finally:
        await store.close()


async def test_the_checkpoint_thread_copies_the_log_while_serving(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "state.sqlite3", flush_interval=0.001, checkpoint_interval=0.01)
    await store.open()
    try:
        await _create(store, 50)
        passes = store.checkpointer.passes
        native_id = await store.checkpointer._thread.run(threading.get_native_id)
        for _ in range(500):  # bounded wait for two more passes of the thread
            if store.checkpointer.passes >= passes + 2:
                break
            await asyncio.sleep(0.01)
        busy, logged, copied = await store.checkpointer.checkpoint()
        assert (busy, copied) == (0, logged)
        assert store.checkpointer.passes >= passes + 3
        [thread] = [t for t in threading.enumerate() if t.name == "sqlite-checkpoint" and t.native_id == native_id]
        assert thread.native_id is not None
        niceness = os.getpriority(os.PRIO_PROCESS, thread.native_id)
        assert niceness == max(CHECKPOINT_NICE, os.getpriority(os.PRIO_PROCESS, 0))
    finally:
        await store.close()
    await asyncio.to_thread(thread.join, 5)  # closing ends the thread (after what was queued on it)
    assert not thread.is_alive()
    reopened = SqliteSessionStore(tmp_path / "state.sqlite3")
    await reopened.open()
    try:
        assert await reopened.get_session("t", "s49") is not None
    finally:
        await reopened.close()
