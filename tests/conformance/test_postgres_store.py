"""PostgresSessionStore against the same conformance suite as SQLite (store.testing), on a real PostgreSQL
(tests/support/postgres.py), plus what only PostgreSQL shows: migrations and the store URL."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from general_agent_server.domain.records import CallKind
from general_agent_server.store.port import (
    SessionExistsError,
    SessionStore,
    StoreError,
    VersionConflictError,
    WriteBatch,
)
from general_agent_server.store.postgres import DsnError, PostgresSessionStore, parse_store_url
from general_agent_server.store.postgres.listener import CHANNEL
from general_agent_server.store.postgres.schema import MIGRATIONS
from general_agent_server.store.postgres.writer import PgWriter
from general_agent_server.store.postgres.writes import InsertSession, apply_write
from general_agent_server.store.testing import SessionStoreConformance
from general_agent_server.store.testing.factories import (
    bump,
    full_session,
    make_entry,
    make_event,
    make_idempotency,
    make_message,
    make_run,
    make_session,
    make_tool_call,
    new_id,
    new_tenant,
)
from general_agent_server.store.wakeups import events_topic


class TestPostgresStore(SessionStoreConformance):
    @pytest.fixture(autouse=True)
    def _url(self, postgres_url: str) -> None:
        self.url = postgres_url

    def make_store(self, directory: Path) -> SessionStore:
        return PostgresSessionStore(parse_store_url(self.url), flush_interval=0.005)

    async def test_schema_version_equals_number_of_migrations(self, store: PostgresSessionStore) -> None:
        conn = await asyncpg.connect(**store.dsn.connect_kwargs())
        try:
            assert await conn.fetchval("SELECT max(version) FROM general_agent_schema") == len(MIGRATIONS)
        finally:
            await conn.close()

    async def test_reopening_keeps_data_and_migrations_are_no_ops(self, store: PostgresSessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await store.create_session(full_session(tenant, sid))
        again = PostgresSessionStore(store.dsn)
        await again.open()
        try:
            assert await again.get_session(tenant, sid) == full_session(tenant, sid)
        finally:
            await again.close()

    async def test_a_step_whose_config_is_as_stored_does_not_write_it(self, store: PostgresSessionStore) -> None:
        """Shown by a config the step would otherwise store: the flag's whole effect is the skipped write."""
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        await store.create_session(record)
        step = bump(record, config=replace(record.config, system_prompt="not written"))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=step, config_unchanged=True))
        assert await store.get_session(tenant, sid) == replace(step, config=record.config)
        changed = bump(step, config=step.config)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=changed))
        assert await store.get_session(tenant, sid) == changed

    async def test_a_step_takes_and_frees_the_lease_in_its_own_update(self, store: PostgresSessionStore) -> None:
        """One round trip for a step's row whatever its lease does (the conformance suite checks the outcomes)."""
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        await store.create_session(record)
        start = bump(record)
        take = WriteBatch(tenant=tenant, session_id=sid, session=start, take_lease="a", lease_ttl_seconds=30)
        free = WriteBatch(tenant=tenant, session_id=sid, session=bump(start), release_lease="a")
        assert await statements_writing(store, [take, free]) == [1, 1]
        assert await store.take_lease(tenant, sid, "b", ttl_seconds=60) == bump(start).version  # "a" freed it

    async def test_a_steps_rows_ride_on_its_update_and_what_cannot_is_written_apart(
        self, store: PostgresSessionStore
    ) -> None:
        """Events, new history messages and run rows go in the step's own statement (store/postgres/steps.py); a
        history replaced whole and two rows of one run (or of one tool call) take the per-table statements, with the
        same outcome."""
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        await store.create_session(record)
        step = bump(record)
        batch = WriteBatch(
            tenant=tenant,
            session_id=sid,
            session=step,
            events=[make_event(sid, 1), make_event(sid, 2)],
            history=[make_message(0), make_message(1)],
            runs=[make_run(tenant, sid, "run-1")],
            tool_calls=[
                make_tool_call(tenant, sid, "run-1", "c1"),
                make_tool_call(tenant, sid, "run-1", "c2", position=1, kind=CallKind.HOSTED),
            ],
        )
        started = make_run(tenant, sid, "run-2")
        called = make_tool_call(tenant, sid, "run-2", "c3")
        twice = WriteBatch(
            tenant=tenant,
            session_id=sid,
            session=bump(step),
            history=[make_message(5)],
            replace_history=True,
            runs=[started, replace(started, request_id="req-2")],
            tool_calls=[called, replace(called, position=1)],
        )
        # The step alone; then the step, the history's DELETE and INSERT, one INSERT per run row, and the tool calls'.
        assert await statements_writing(store, [batch, twice]) == [1, 6]
        assert await store.list_tool_calls(tenant, sid, "run-1") == batch.tool_calls
        assert await store.get_tool_call(tenant, sid, "c3") == replace(called, position=1)
        assert [e.sequence for e in await store.read_events(tenant, sid, after_sequence=0, limit=10)] == [1, 2]
        assert await store.load_history(tenant, sid) == [make_message(5)]
        assert await store.get_run(tenant, sid, "run-1") == make_run(tenant, sid, "run-1")
        assert await store.get_run(tenant, sid, "run-2") == replace(started, request_id="req-2")
        assert await store.get_session(tenant, sid) == bump(step)

    async def test_a_steps_transcript_rides_on_it_in_its_order(self, store: PostgresSessionStore) -> None:
        """Transcript entries go in the step's statement and are read back in the order written, whatever their
        sequences; a step that clears the transcript first writes them apart."""
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        await store.create_session(record)
        entries = [make_entry(sequence) for sequence in (7, 3, 9, 1, 8, 2, 6, 4, 5, 10) * 3]
        step = WriteBatch(tenant=tenant, session_id=sid, session=bump(record), transcript=entries)
        cleared = WriteBatch(
            tenant=tenant, session_id=sid, session=bump(bump(record)), transcript=entries[:2], clear_transcript=True
        )
        assert await statements_writing(store, [step]) == [1]
        read = await store.read_transcript(tenant, sid, after_entry_id=0, limit=100)
        assert [e.sequence for e in read] == [e.sequence for e in entries]
        assert [e.body for e in read] == [e.body for e in entries]
        assert await statements_writing(store, [cleared]) == [3]  # the step, the DELETE, the entries
        read = await store.read_transcript(tenant, sid, after_entry_id=0, limit=100)
        assert [e.sequence for e in read] == [7, 3]

    async def test_a_group_of_one_statement_goes_without_begin_and_commit(self, store: PostgresSessionStore) -> None:
        """A step's statement carries its rows and its wake-up, which other replicas still receive, and a session's
        creation is its INSERT alone (store/postgres/writer.py); a group one statement cannot take whole keeps its
        transaction."""
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        await store.create_session(record)
        queries: list[str] = []
        pool = await asyncpg.create_pool(min_size=1, max_size=1, **store.dsn.connect_kwargs())
        async with pool.acquire() as conn:  # the pool's one connection, which the writer then uses
            conn.add_query_logger(lambda logged: queries.append(logged.query))
        listener = await asyncpg.connect(**store.dsn.connect_kwargs())
        heard: asyncio.Queue[str] = asyncio.Queue()
        await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
        writer = PgWriter(pool, flush_interval=0.001)
        try:
            step = bump(record)
            one = WriteBatch(
                tenant=tenant, session_id=sid, session=step, events=[make_event(sid, 1)], transcript=[make_entry(1)]
            )
            await writer.submit(one)
            assert _group_statements(queries) == ["WITH step"]
            payload = await asyncio.wait_for(heard.get(), 30)
            assert payload.startswith(events_topic(tenant, sid))
            assert payload.endswith("\t1")
            queries.clear()
            two = WriteBatch(
                tenant=tenant, session_id=sid, session=bump(step), transcript=[make_entry(2)], clear_transcript=True
            )
            await writer.submit(two)
            sent = _group_statements(queries)
            assert (sent[0], sent[-1]) == ("BEGIN", "COMMIT")
            assert "SELECT pg_notify" not in sent
            stale = WriteBatch(tenant=tenant, session_id=sid, session=bump(step), events=[make_event(sid, 5)])
            with pytest.raises(VersionConflictError):
                await writer.submit(stale)
            assert [e.sequence for e in await store.read_events(tenant, sid, after_sequence=0, limit=10)] == [1]
            after = WriteBatch(tenant=tenant, session_id=sid, session=bump(bump(step)), events=[make_event(sid, 2)])
            await writer.submit(after)
            # Wake-ups arrive in commit order: the stale step, which wrote nothing, woke nobody.
            assert (await asyncio.wait_for(heard.get(), 30)).endswith("\t2")
            # A session's creation is one statement too, unless its batch holds more (an idempotency record).
            queries.clear()
            created = make_session(tenant, new_id())
            await writer.submit(
                WriteBatch(tenant=tenant, session_id=created.session_id), operation=InsertSession(created)
            )
            assert _group_statements(queries) == ["WITH inserted"]
            with pytest.raises(SessionExistsError):
                await writer.submit(
                    WriteBatch(tenant=tenant, session_id=created.session_id), operation=InsertSession(created)
                )
            queries.clear()
            again = make_session(tenant, new_id())
            remembered = make_idempotency(tenant, "CreateSession", new_id())
            first = WriteBatch(tenant=tenant, session_id=again.session_id, idempotency=remembered)
            await writer.submit(first, operation=InsertSession(again))
            assert _group_statements(queries) == ["BEGIN", "WITH inserted", "INSERT", "COMMIT"]
            assert await store.get_session(tenant, again.session_id) == again
            assert await store.get_idempotency(tenant, "CreateSession", remembered.request_id) == remembered
        finally:
            await writer.stop()
            await pool.close()
            await listener.close()

    async def test_a_version_2_database_gets_its_session_counts_and_config_table(
        self, store: PostgresSessionStore
    ) -> None:
        """Migrations 3 (session_counts) and 4 (session_configs), in a database of its own: the test takes them
        back to stand for version 2."""
        admin = await asyncpg.connect(**store.dsn.connect_kwargs())
        database = f"v2_{new_id().replace('-', '_')}"
        records = [full_session("t1", sid) for sid in ("a", "b", "c")] + [full_session("t2", "a")]
        try:
            await admin.execute(f"CREATE DATABASE {database}")
            dsn = parse_store_url(self.url.rsplit("/", 1)[0] + f"/{database}")
            first = PostgresSessionStore(dsn)
            await first.open()
            try:
                for record in records:
                    await first.create_session(record)
            finally:
                await first.close()
            conn = await asyncpg.connect(**dsn.connect_kwargs())
            try:
                await conn.execute(
                    "UPDATE sessions s SET config_json = c.config_json FROM session_configs c"
                    " WHERE c.tenant = s.tenant AND c.session_id = s.session_id; DROP TABLE session_configs;"
                    "DROP TRIGGER sessions_counted ON sessions; DROP FUNCTION general_agent_count_sessions();"
                    "DROP TABLE session_counts; DELETE FROM general_agent_schema WHERE version > 2;"
                )
            finally:
                await conn.close()

            again = PostgresSessionStore(dsn)
            await again.open()
            try:
                assert [await again.get_session(r.tenant, r.session_id) for r in records] == records
                assert (await again.count_sessions("t1"), await again.count_sessions("t2")) == (3, 1)
                await again.create_session(make_session("t1", "d"))
                await again.delete_session("t2", "a")
                assert (await again.count_sessions("t1"), await again.count_sessions("t2")) == (4, 0)
            finally:
                await again.close()
        finally:
            await admin.execute(f"DROP DATABASE IF EXISTS {database}")
            await admin.close()


_GROUP_STATEMENTS = ("WITH step", "WITH inserted", "BEGIN", "COMMIT", "SELECT pg_notify", "INSERT", "UPDATE", "DELETE")


def _group_statements(queries: list[str]) -> list[str]:
    """What the writer sent for a group, by its first words (asyncpg's own type and reset queries left out)."""
    return [next(p for p in _GROUP_STATEMENTS if q.startswith(p)) for q in queries if q.startswith(_GROUP_STATEMENTS)]


async def statements_writing(store: PostgresSessionStore, batches: list[WriteBatch]) -> list[int]:
    """How many statements that write (UPDATE, INSERT, DELETE) each batch takes, each in a transaction of its own;
    asyncpg's own queries (BEGIN, type introspection) are left out."""
    conn = await asyncpg.connect(**store.dsn.connect_kwargs())
    queries: list[str] = []
    conn.add_query_logger(lambda logged: queries.append(logged.query))
    counts = []
    try:
        for batch in batches:
            queries.clear()
            async with conn.transaction():
                await apply_write(conn, batch, None)
            counts.append(sum(1 for q in queries if any(verb in q for verb in ("UPDATE ", "INSERT ", "DELETE "))))
    finally:
        await conn.close()
    return counts


def test_a_password_in_the_url_is_refused_naming_the_field_and_never_repeated() -> None:
    with pytest.raises(DsnError) as caught:
        parse_store_url("postgresql://agent:hunter2-secret@db.example:5432/agents")
    assert str(caught.value).startswith("store:")
    assert "hunter2-secret" not in str(caught.value)


def test_the_password_comes_from_outside_the_url_and_is_never_shown() -> None:
    dsn = parse_store_url("postgresql://agent@db.example:6543/agents", password="hunter2-secret")
    assert dsn.connect_kwargs()["password"] == "hunter2-secret"
    assert (dsn.host, dsn.port, dsn.user, dsn.database) == ("db.example", 6543, "agent", "agents")
    assert "hunter2-secret" not in dsn.redacted + repr(dsn)
    assert dsn.scrub("auth failed for hunter2-secret") == "auth failed for [REDACTED]"


@pytest.mark.parametrize("url", ["mysql://a@h/d", "postgresql://h/d", "postgresql://a@h", "postgresql://a@h:x/d"])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(DsnError, match=r"^store:"):
        parse_store_url(url)


async def test_an_unreachable_database_fails_open_without_the_password(postgres_url: str) -> None:
    dsn = parse_store_url(postgres_url.replace("postgresql://postgres@", "postgresql://nobody@"), password="pw-x1")
    store = PostgresSessionStore(dsn)
    with pytest.raises(StoreError) as caught:
        await store.open()
    assert "pw-x1" not in str(caught.value)
    assert dsn.redacted in str(caught.value)
