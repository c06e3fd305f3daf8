"""The conformance tests of BatchWriter: compare-and-set, atomic batches, buffered writes and flush."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from general_agent_server.domain.session import SessionState, Usage
from general_agent_server.store.port import SessionStore, StoreError, VersionConflictError, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import (
    at,
    bump,
    make_entry,
    make_event,
    make_idempotency,
    make_message,
    make_run,
    make_session,
    new_id,
    new_tenant,
)
from general_agent_server.store.testing.helpers import all_events, all_transcript, create, without_entry_ids


@async_tests
class BatchWriterConformance(StoreConformance):
    """write and flush: CAS on the session version, a failed batch writes nothing, writes land in call order."""

    async def test_write_with_next_version_succeeds(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        v2 = bump(
            v1,
            state=SessionState.RUNNING,
            active_run_id="run-1",
            last_sequence=3,
            sequence_reserved=10,
            update_time=at(60),
            cumulative_usage=Usage(input_tokens=3, model_calls=1),
        )
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2))
        got = await store.get_session(tenant, sid)
        assert got == v2
        assert got is not None
        assert got.version == 2

        v3 = bump(v2, state=SessionState.IDLE, active_run_id="")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v3))
        assert await store.get_session(tenant, sid) == v3

    async def test_write_with_stale_version_raises_conflict_and_changes_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2))

        # Another writer that read v1 tries to store its own v2.
        stale = bump(v1, state=SessionState.SUSPENDED, active_run_id="loser")
        with pytest.raises(VersionConflictError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=stale,
                    events=[make_event(sid, 1), make_event(sid, 2)],
                    transcript=[make_entry(1)],
                    history=[make_message(0), make_message(1)],
                    runs=[make_run(tenant, sid, "run-loser", request_id="req-loser")],
                    idempotency=make_idempotency(tenant, "StreamTurn", "req-loser"),
                )
            )

        assert await store.get_session(tenant, sid) == v2
        assert await all_events(store, tenant, sid) == []
        assert await store.oldest_event_sequence(tenant, sid) is None
        assert await store.count_transcript(tenant, sid) == 0
        assert await all_transcript(store, tenant, sid) == []
        assert await store.load_history(tenant, sid) == []
        assert await store.get_run(tenant, sid, "run-loser") is None
        assert await store.find_run_by_request_id(tenant, sid, "req-loser") is None
        assert await store.get_idempotency(tenant, "StreamTurn", "req-loser") is None

    async def test_write_with_stale_version_keeps_existing_history_and_transcript(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1)
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                session=v2,
                history=[make_message(0), make_message(1)],
                transcript=[make_entry(1)],
            )
        )

        with pytest.raises(VersionConflictError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=bump(v1),
                    history=[make_message(9)],
                    replace_history=True,
                    clear_transcript=True,
                )
            )

        assert await store.load_history(tenant, sid) == [make_message(0), make_message(1)]
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [make_entry(1)]
        assert await store.get_session(tenant, sid) == v2

    async def test_write_skipping_a_version_raises_conflict(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        with pytest.raises(VersionConflictError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=replace(v1, version=3),
                    events=[make_event(sid, 1)],
                )
            )

        assert await store.get_session(tenant, sid) == v1
        assert await all_events(store, tenant, sid) == []

    async def test_write_session_in_wrong_tenant_raises_and_creates_nothing(self, store: SessionStore) -> None:
        tenant, other, sid = new_tenant(), new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        with pytest.raises(StoreError):
            await store.write(WriteBatch(tenant=other, session_id=sid, session=bump(replace(v1, tenant=other))))

        assert await store.get_session(other, sid) is None
        assert await store.get_session(tenant, sid) == v1

    async def test_write_without_session_record_leaves_version_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]))
        assert await store.get_session(tenant, sid) == v1
        assert [e.sequence for e in await all_events(store, tenant, sid)] == [1]

    async def test_failed_batch_does_not_drop_other_queued_writes(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]), durable=False)
        with pytest.raises(VersionConflictError):
            await store.write(WriteBatch(tenant=tenant, session_id=sid, session=replace(v1, version=7)))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 2)]), durable=False)
        await store.flush()

        assert [e.sequence for e in await all_events(store, tenant, sid)] == [1, 2]
        assert await store.get_session(tenant, sid) == v1

    async def test_buffered_write_is_visible_after_flush(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1, last_sequence=1)

        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                session=v2,
                events=[make_event(sid, 1)],
                transcript=[make_entry(1)],
                history=[make_message(0)],
            ),
            durable=False,
        )
        await store.flush()

        assert await store.get_session(tenant, sid) == v2
        assert await all_events(store, tenant, sid) == [make_event(sid, 1)]
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [make_entry(1)]
        assert await store.load_history(tenant, sid) == [make_message(0)]

    async def test_flush_with_nothing_queued_returns(self, store: SessionStore) -> None:
        await asyncio.wait_for(store.flush(), timeout=10)
        await asyncio.wait_for(store.flush(), timeout=10)

    async def test_many_buffered_writes_then_a_durable_one_commit_in_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid, version=1))
        count = 60

        # Each buffered batch is a CAS on the previous one's version: any reordering would conflict.
        for i in range(1, count + 1):
            record = bump(record, last_sequence=i)
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=record,
                    events=[make_event(sid, i)],
                    transcript=[make_entry(i)],
                    history=[make_message(i - 1)],
                    history_base=i - 1,
                ),
                durable=False,
            )
        final = bump(record, last_sequence=count + 1, state=SessionState.IDLE)
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid, session=final, events=[make_event(sid, count + 1)]),
            durable=True,
        )

        # No flush: returning from the durable write means everything queued before it is committed.
        assert await store.get_session(tenant, sid) == final
        assert await all_events(store, tenant, sid) == [make_event(sid, i) for i in range(1, count + 2)]
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [
            make_entry(i) for i in range(1, count + 1)
        ]
        assert await store.load_history(tenant, sid) == [make_message(i) for i in range(count)]

    async def test_concurrent_durable_writers_to_different_sessions(self, store: SessionStore) -> None:
        tenant = new_tenant()
        sids = [new_id() for _ in range(8)]
        for sid in sids:
            await create(store, make_session(tenant, sid, version=1))

        async def writer(sid: str) -> None:
            record = await store.get_session(tenant, sid)
            assert record is not None
            for i in range(1, 6):
                record = bump(record, last_sequence=i)
                await store.write(
                    WriteBatch(tenant=tenant, session_id=sid, session=record, events=[make_event(sid, i)])
                )

        await asyncio.gather(*(writer(sid) for sid in sids))

        for sid in sids:
            got = await store.get_session(tenant, sid)
            assert got is not None
            assert got.version == 6
            assert got.last_sequence == 5
            assert [e.sequence for e in await all_events(store, tenant, sid)] == [1, 2, 3, 4, 5]
