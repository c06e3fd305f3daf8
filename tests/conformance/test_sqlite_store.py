"""SqliteSessionStore against the conformance suite, plus what only the SQLite file can show."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from general_agent_server.store.port import SessionStore, StoreError, WriteBatch
from general_agent_server.store.sqlite import SqliteSessionStore
from general_agent_server.store.sqlite.migrations import MIGRATIONS
from general_agent_server.store.testing import SessionStoreConformance
from general_agent_server.store.testing.factories import (
    bump,
    full_session,
    make_checkpoint,
    make_entry,
    make_event,
    make_message,
    make_run,
    make_session,
    new_id,
    new_tenant,
)
from general_agent_server.store.testing.helpers import all_events, all_transcript, without_entry_ids

FLUSH_INTERVAL = 0.005


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the file, closed afterwards."""
    with closing(sqlite3.connect(path)) as conn:
        yield conn


def pragma(path: Path, name: str) -> object:
    with raw(path) as conn:
        row = conn.execute(f"PRAGMA {name}").fetchone()
    assert row is not None
    return row[0]


class TestSqliteStore(SessionStoreConformance):
    def make_store(self, directory: Path) -> SessionStore:
        return SqliteSessionStore(directory / "x.sqlite3", flush_interval=FLUSH_INTERVAL)

    @pytest.fixture
    def db_path(self, tmp_path: Path) -> Path:
        return tmp_path / "state" / "x.sqlite3"

    async def _open(self, path: Path) -> SqliteSessionStore:
        store = SqliteSessionStore(path, flush_interval=FLUSH_INTERVAL)
        await store.open()
        return store

    # ------------------------------------------------------------ file
    async def test_file_is_created_with_mode_0600(self, db_path: Path) -> None:
        assert not db_path.exists()
        store = await self._open(db_path)
        try:
            tenant, sid = new_tenant(), new_id()
            await store.create_session(full_session(tenant, sid))
            assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
        finally:
            await store.close()
        assert stat.S_IMODE(db_path.stat().st_mode) == 0o600

    async def test_wal_and_shm_files_are_owner_only(self, db_path: Path) -> None:
        store = await self._open(db_path)
        try:
            tenant, sid = new_tenant(), new_id()
            await store.create_session(full_session(tenant, sid))
            side_files = [db_path.with_name(db_path.name + suffix) for suffix in ("-wal", "-shm")]
            present = [p for p in side_files if p.exists()]
            assert present, "a WAL-mode database with an open connection has its -wal/-shm files"
            for p in present:
                assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name
        finally:
            await store.close()

    async def test_journal_mode_is_wal(self, store: SqliteSessionStore) -> None:
        assert str(pragma(store.path, "journal_mode")).lower() == "wal"

    async def test_user_version_equals_number_of_migrations(self, store: SqliteSessionStore) -> None:
        assert len(MIGRATIONS) >= 1
        assert pragma(store.path, "user_version") == len(MIGRATIONS)

    async def test_no_checkpoint_file_rows_outlive_their_checkpoint(self, store: SqliteSessionStore) -> None:
        """File rows are invisible through the API once their checkpoint is gone, so count them directly."""
        tenant, sid = new_tenant(), new_id()
        await store.create_session(make_session(tenant, sid))

        def file_rows() -> int:
            with raw(store.path) as conn:
                row = conn.execute("SELECT COUNT(*) FROM checkpoint_files WHERE tenant=?", (tenant,)).fetchone()
            return int(row[0])

        checkpoints = [make_checkpoint(str(i)) for i in range(3)]  # two files each
        for checkpoint in checkpoints:
            await store.add_checkpoint(tenant, sid, checkpoint, max_count=2, max_bytes=1 << 20)
        assert file_rows() == 4  # the oldest was dropped by the count bound
        await store.delete_checkpoints(tenant, sid, [checkpoints[2].checkpoint_id])
        assert file_rows() == 2
        await store.delete_session(tenant, sid)
        assert file_rows() == 0

    # ------------------------------------------------------------ migrations
    async def test_reopening_an_existing_file_keeps_data(self, db_path: Path) -> None:
        tenant, sid = new_tenant(), new_id()
        record = full_session(tenant, sid)
        first = await self._open(db_path)
        try:
            await first.create_session(record)
            await first.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=bump(record),
                    events=[make_event(sid, 1)],
                    transcript=[make_entry(1)],
                    history=[make_message(0)],
                    runs=[make_run(tenant, sid, "run-1", request_id="req-1")],
                )
            )
        finally:
            await first.close()

        for _ in range(2):  # migrations run again on every open and must be no-ops
            again = await self._open(db_path)
            try:
                assert await again.get_session(tenant, sid) == bump(record)
                assert await all_events(again, tenant, sid) == [make_event(sid, 1)]
                assert without_entry_ids(await all_transcript(again, tenant, sid)) == [make_entry(1)]
                assert await again.load_history(tenant, sid) == [make_message(0)]
                assert await again.get_run(tenant, sid, "run-1") == make_run(tenant, sid, "run-1", request_id="req-1")
            finally:
                await again.close()
            assert pragma(db_path, "user_version") == len(MIGRATIONS)

    async def test_a_version_6_file_gets_its_session_counts_and_config_table(self, db_path: Path) -> None:
        """Migrations 7 (session_counts) and 8 (session_configs) on a file whose sessions are already there."""
        tenant, other = new_tenant(), new_tenant()
        records = [full_session(tenant, sid) for sid in ("a", "b", "c")] + [full_session(other, "a")]
        first = await self._open(db_path)
        try:
            for record in records:
                await first.create_session(record)
        finally:
            await first.close()
        with raw(db_path) as conn:  # the file as version 6 left it: configs in sessions, no counts, no triggers
            conn.executescript(
                "UPDATE sessions SET config_json = (SELECT c.config_json FROM session_configs c"
                " WHERE c.tenant = sessions.tenant AND c.session_id = sessions.session_id);"
                "DROP TABLE session_configs; DROP TRIGGER sessions_counted_in; DROP TRIGGER sessions_counted_out;"
                "DROP TABLE session_counts; PRAGMA user_version=6;"
            )

        again = await self._open(db_path)
        try:
            assert [await again.get_session(r.tenant, r.session_id) for r in records] == records
            assert (await again.count_sessions(tenant), await again.count_sessions(other)) == (3, 1)
            await again.create_session(make_session(tenant, "d"))
            await again.delete_session(other, "a")
            assert (await again.count_sessions(tenant), await again.count_sessions(other)) == (4, 0)
        finally:
            await again.close()
        assert pragma(db_path, "user_version") == len(MIGRATIONS)
        with raw(db_path) as conn:
            assert conn.execute("SELECT DISTINCT config_json FROM sessions").fetchall() == [("",)]

    async def test_newer_schema_version_than_the_code_raises_store_error(self, db_path: Path) -> None:
        first = await self._open(db_path)
        await first.close()
        with raw(db_path) as conn:
            conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
            conn.commit()

        store = SqliteSessionStore(db_path, flush_interval=FLUSH_INTERVAL)
        try:
            with pytest.raises(StoreError, match="newer"):
                await store.open()
        finally:
            await store.close()
        # The file is left as it was: no downgrade.
        assert pragma(db_path, "user_version") == len(MIGRATIONS) + 1

    # ------------------------------------------------------------ durability
    async def test_durable_write_survives_close_and_reopen(self, db_path: Path) -> None:
        tenant, sid = new_tenant(), new_id()
        record = full_session(tenant, sid)
        store = await self._open(db_path)
        try:
            await store.create_session(record)
            await store.write(
                WriteBatch(tenant=tenant, session_id=sid, session=bump(record), events=[make_event(sid, 1)]),
                durable=True,
            )
        finally:
            await store.close()

        reopened = await self._open(db_path)
        try:
            assert await reopened.get_session(tenant, sid) == bump(record)
            assert await all_events(reopened, tenant, sid) == [make_event(sid, 1)]
        finally:
            await reopened.close()

    async def test_durable_write_is_committed_to_the_file_when_it_returns(self, db_path: Path) -> None:
        tenant, sid = new_tenant(), new_id()
        store = await self._open(db_path)
        try:
            await store.create_session(full_session(tenant, sid))
            await store.write(
                WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1), make_event(sid, 2)]),
                durable=True,
            )
            # Another connection (another process after a kill -9) sees it without close or flush.
            with raw(db_path) as conn:
                rows = conn.execute(
                    "SELECT sequence FROM events WHERE tenant=? AND session_id=? ORDER BY sequence",
                    (tenant, sid),
                ).fetchall()
            assert [r[0] for r in rows] == [1, 2]
        finally:
            await store.close()

    async def test_close_flushes_buffered_writes(self, db_path: Path) -> None:
        tenant, sid = new_tenant(), new_id()
        store = await self._open(db_path)
        try:
            await store.create_session(full_session(tenant, sid))
            for i in range(1, 6):
                await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, i)]), durable=False)
        finally:
            await store.close()

        reopened = await self._open(db_path)
        try:
            assert await all_events(reopened, tenant, sid) == [make_event(sid, i) for i in range(1, 6)]
        finally:
            await reopened.close()


async def test_a_locked_database_fails_that_write_and_the_writer_recovers(tmp_path: Path) -> None:
    """A write that cannot take the lock fails with StoreError; once the lock is gone, writes work again
    (the writer task must not die)."""
    path = tmp_path / "locked.sqlite3"
    store = SqliteSessionStore(path, flush_interval=0.005, busy_timeout_ms=50)
    await store.open()
    try:
        record = make_session("default", "s1")
        await store.create_session(record)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError):
                await store.write(WriteBatch(tenant="default", session_id="s1", session=bump(record)))
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        await store.write(WriteBatch(tenant="default", session_id="s1", session=bump(record)))
        stored = await store.get_session("default", "s1")
        assert stored is not None
        assert stored.version == record.version + 1
    finally:
        await store.close()


def open_handles(path: Path) -> list[str]:
    """This process's file descriptors open on `path` (Linux)."""
    fd_dir = Path("/proc/self/fd")
    handles = []
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            if Path(os.readlink(fd)) == path:
                handles.append(fd.name)
    return handles


async def test_a_failed_open_releases_its_connections(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 5}")
    conn.close()
    store = SqliteSessionStore(path)
    with pytest.raises(StoreError):
        await store.open()
    assert open_handles(path) == []
    with pytest.raises(StoreError):
        await store.get_session("default", "s1")


async def test_an_open_store_holds_the_file_and_close_lets_it_go(tmp_path: Path) -> None:
    """The other side of the test above: the handle check sees the store's connections."""
    path = tmp_path / "x.sqlite3"
    store = SqliteSessionStore(path)
    await store.open()
    assert open_handles(path)
    await store.close()
    assert open_handles(path) == []


async def test_a_checkpoint_retried_after_its_group_failed_reports_each_dropped_id_once(tmp_path: Path) -> None:
    """A checkpoint and a failing write commit in one group; the group fails, each write runs again alone,
    and the checkpoint's answer must be that of its one successful run."""
    store = SqliteSessionStore(tmp_path / "x.sqlite3", flush_interval=FLUSH_INTERVAL)
    await store.open()
    try:
        tenant, sid = new_tenant(), new_id()
        await store.create_session(make_session(tenant, sid))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]))
        old, new = make_checkpoint("old"), make_checkpoint("new")
        assert await store.add_checkpoint(tenant, sid, old, max_count=1, max_bytes=1 << 20) == []

        # Started together, the checkpoint first: the writer takes both as one group, the checkpoint first.
        taken = WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)])
        dropped, failed = await asyncio.gather(
            store.add_checkpoint(tenant, sid, new, max_count=1, max_bytes=1 << 20),
            store.write(taken),
            return_exceptions=True,
        )

        assert isinstance(failed, StoreError)
        assert dropped == [old.checkpoint_id]
        assert [c.checkpoint_id for c in await store.list_checkpoints(tenant, sid, limit=10)] == [new.checkpoint_id]
    finally:
        await store.close()
