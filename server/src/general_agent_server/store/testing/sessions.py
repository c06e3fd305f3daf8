"""The conformance tests of SessionRecordStore: create, get and delete, tenant isolation."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from general_agent_server.domain.records import RunStatus
from general_agent_server.domain.session import (
    AutoCompaction,
    ForkOrigin,
    MemoryConfig,
    SessionConfig,
    SessionIdentity,
    SessionLimits,
    SessionMode,
    SessionRecord,
    SessionState,
    ThinkingConfig,
    ThinkingMode,
    Usage,
)
from general_agent_server.domain.transcript import SystemPromptEntry
from general_agent_server.store.port import (
    SessionExistsError,
    SessionQuery,
    SessionStore,
    VersionConflictError,
    WriteBatch,
)
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import (
    T0,
    bump,
    full_session,
    make_entry,
    make_event,
    make_idempotency,
    make_message,
    make_run,
    make_session,
    new_id,
    new_tenant,
)
from general_agent_server.store.testing.helpers import all_events, all_transcript, create, list_ids, without_entry_ids


@async_tests
class SessionRecordsConformance(StoreConformance):
    """create_session, get_session and delete_session: records round-trip exactly, ids are per tenant, and a
    delete takes everything the session owns."""

    async def test_create_get_round_trips_every_field(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = full_session(tenant, sid)
        await store.create_session(record)

        got = await store.get_session(tenant, sid)

        assert got is not None
        assert got.tenant == tenant
        assert got.identity == SessionIdentity(mode=SessionMode.CODING, session_id=sid, session_key="proj/full-key")
        assert got.session_id == sid
        cfg = got.config
        assert cfg.system_prompt == record.config.system_prompt
        assert cfg.model_ref == "anthropic/claude-sonnet-4-6"
        assert cfg.thinking == ThinkingConfig(mode=ThinkingMode.BUDGET, budget_tokens=2048)
        assert cfg.max_tokens == 4096
        assert cfg.auth_profile_id == "team-a-profile"
        assert tuple(cfg.allowed_tools) == ("bash", "read_file", "write_file")
        assert cfg.memory == MemoryConfig(enabled=True, user_id="user-1", agent_id="agent-1")
        assert dict(cfg.labels) == {"team": "a", "app.example.com/tier": "gold", "env": "prod"}
        assert cfg.limits == SessionLimits(
            max_model_calls_per_run=7,
            max_tool_calls_per_run=9,
            run_deadline_seconds=120.5,
            hosted_call_timeout_seconds=30.25,
        )
        assert cfg.auto_compaction == AutoCompaction(threshold_pct=80, cooldown_seconds=12.5)
        assert cfg.hosted_tools == record.config.hosted_tools
        assert {k: dict(v) for k, v in cfg.mcp_servers.items()} == {
            "docs": {"command": "mcp-docs", "args": ["--read-only"], "env": {"A": "1"}}
        }
        assert tuple(cfg.disabled_mcp_servers) == ("docs",)
        assert [dict(h) for h in cfg.hook_registrations] == [
            {"event": "pre_tool_use", "url": "http://127.0.0.1:9/hook"}
        ]
        assert cfg == record.config
        assert got.create_time == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
        assert got.create_time.microsecond == 123456
        assert got.update_time == datetime(2024, 5, 6, 7, 9, 10, 654321, tzinfo=UTC)
        assert got.update_time.microsecond == 654321
        assert got.create_time.utcoffset() == timedelta(0)
        assert got.parent_session_id == "parent-session-1"
        assert got.forked_from == ForkOrigin(session_id="source-session-1", at_sequence=42)
        assert got.state is SessionState.SUSPENDED
        assert got.active_run_id == "run-7"
        assert tuple(got.pending_call_ids) == ("call-1", "call-2")
        assert got.stop_requested is True
        assert got.usage_snapshot == record.usage_snapshot
        assert got.usage_snapshot is not None
        assert got.usage_snapshot.capture_time == datetime(2024, 5, 6, 7, 9, 1, 111111, tzinfo=UTC)
        assert got.cumulative_usage == Usage(
            input_tokens=10,
            output_tokens=20,
            cache_read_input_tokens=30,
            cache_creation_input_tokens=40,
            model_calls=5,
        )
        assert got.last_sequence == 57
        assert got.sequence_reserved == 64
        assert got.history_message_count == 12
        assert got.last_compaction_time == datetime(2024, 5, 6, 7, 9, 5, 222222, tzinfo=UTC)
        assert got.approved_tools == ("write", "docs__search")
        assert got.config.approval_policy == ("mutating", "lookup")
        assert got.version == 3
        assert got == record

    async def test_create_get_round_trips_a_minimal_record(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = SessionRecord(
            tenant=tenant,
            identity=SessionIdentity(session_id=sid),
            config=SessionConfig(),
            create_time=T0,
            update_time=T0,
        )
        await store.create_session(record)
        got = await store.get_session(tenant, sid)
        assert got == record
        assert got is not None
        assert got.forked_from is None
        assert got.usage_snapshot is None
        assert got.cumulative_usage == Usage()
        assert got.version == 0

    async def test_get_unknown_session_returns_none(self, store: SessionStore) -> None:
        assert await store.get_session(new_tenant(), new_id()) is None

    async def test_reads_cancelled_mid_flight_leave_later_reads_current(self, store: SessionStore) -> None:
        """A read whose caller is cancelled (a client gone mid-RPC) must not pin the reader to an old snapshot:
        every later read sees what was committed after it."""
        tenant, sid = new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid))
        messages = [make_message(i) for i in range(400)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages, history_base=0))
        for _ in range(20):
            reading = asyncio.ensure_future(store.load_history(tenant, sid))
            await asyncio.sleep(0)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            record = bump(record)
            await store.write(WriteBatch(tenant=tenant, session_id=sid, session=record))
            stored = await store.get_session(tenant, sid)
            assert stored is not None
            assert stored.version == record.version

    async def test_create_existing_id_raises_session_exists(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        original = await create(store, make_session(tenant, sid, session_key="first"))

        with pytest.raises(SessionExistsError):
            await store.create_session(make_session(tenant, sid, session_key="second", version=9))

        assert await store.get_session(tenant, sid) == original

    async def test_create_with_batch_commits_both(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        idem = make_idempotency(tenant, "CreateSession", "req-1", result='{"session_id": "x"}')
        entry = make_entry(1, SystemPromptEntry(prompt="be brief", model_ref="m"))
        await store.create_session(
            record, batch=WriteBatch(tenant=tenant, session_id=sid, idempotency=idem, transcript=[entry])
        )

        assert await store.get_session(tenant, sid) == record
        assert await store.get_idempotency(tenant, "CreateSession", "req-1") == idem
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [entry]

    async def test_create_existing_id_with_batch_writes_nothing_of_the_batch(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        idem = make_idempotency(tenant, "CreateSession", "req-dup")

        with pytest.raises(SessionExistsError):
            await store.create_session(
                make_session(tenant, sid),
                batch=WriteBatch(tenant=tenant, session_id=sid, idempotency=idem, transcript=[make_entry(1)]),
            )

        assert await store.get_idempotency(tenant, "CreateSession", "req-dup") is None
        assert await store.count_transcript(tenant, sid) == 0

    async def test_same_id_in_another_tenant_is_independent(self, store: SessionStore) -> None:
        tenant_a, tenant_b, sid = new_tenant(), new_tenant(), new_id()
        rec_a = await create(store, make_session(tenant_a, sid, session_key="key-a", labels={"owner": "a"}))
        rec_b = await create(
            store, make_session(tenant_b, sid, session_key="key-b", mode=SessionMode.CODING, version=5)
        )

        assert await store.get_session(tenant_a, sid) == rec_a
        assert await store.get_session(tenant_b, sid) == rec_b

        # A CAS write in one tenant leaves the other untouched.
        await store.write(
            WriteBatch(
                tenant=tenant_a,
                session_id=sid,
                session=bump(rec_a, state=SessionState.RUNNING),
                events=[make_event(sid, 1)],
                history=[make_message(0)],
                transcript=[make_entry(1)],
            )
        )
        assert await store.get_session(tenant_b, sid) == rec_b
        assert await all_events(store, tenant_b, sid) == []
        assert await store.load_history(tenant_b, sid) == []
        assert await store.count_transcript(tenant_b, sid) == 0
        assert await store.oldest_event_sequence(tenant_b, sid) is None
        assert len(await all_events(store, tenant_a, sid)) == 1

    async def test_get_in_wrong_tenant_returns_none(self, store: SessionStore) -> None:
        tenant, other, sid = new_tenant(), new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.get_session(other, sid) is None

    async def test_delete_in_wrong_tenant_returns_false_and_deletes_nothing(self, store: SessionStore) -> None:
        tenant, other, sid = new_tenant(), new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid))
        run = make_run(tenant, sid, "run-1")
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                events=[make_event(sid, 1)],
                transcript=[make_entry(1)],
                history=[make_message(0)],
                runs=[run],
            )
        )

        assert await store.delete_session(other, sid) is False

        assert await store.get_session(tenant, sid) == record
        assert len(await all_events(store, tenant, sid)) == 1
        assert await store.count_transcript(tenant, sid) == 1
        assert await store.load_history(tenant, sid) == [make_message(0)]
        assert await store.get_run(tenant, sid, "run-1") == run

    async def test_delete_removes_session_and_everything_it_owns(self, store: SessionStore) -> None:
        tenant, sid, keep = new_tenant(), new_id(), new_id()
        for s in (sid, keep):
            await create(store, make_session(tenant, s))
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=s,
                    events=[make_event(s, 1), make_event(s, 2)],
                    transcript=[make_entry(1)],
                    history=[make_message(0), make_message(1)],
                    runs=[
                        make_run(tenant, s, "run-1", request_id="req-1"),
                        make_run(tenant, s, "run-2", status=RunStatus.SUSPENDED),
                    ],
                )
            )

        assert await store.delete_session(tenant, sid) is True

        assert await store.get_session(tenant, sid) is None
        assert await store.load_history(tenant, sid) == []
        assert await all_transcript(store, tenant, sid) == []
        assert await store.count_transcript(tenant, sid) == 0
        assert await all_events(store, tenant, sid) == []
        assert await store.oldest_event_sequence(tenant, sid) is None
        assert await store.get_run(tenant, sid, "run-1") is None
        assert await store.get_run(tenant, sid, "run-2") is None
        assert await store.find_run_by_request_id(tenant, sid, "req-1") is None
        unfinished = {(r.tenant, r.session_id, r.run_id) for r in await store.list_unfinished_runs()}
        assert (tenant, sid, "run-1") not in unfinished
        assert (tenant, sid, "run-2") not in unfinished
        assert sid not in await list_ids(store, tenant, SessionQuery(include_children=True))

        # The other session is intact.
        assert await store.get_session(tenant, keep) is not None
        assert len(await all_events(store, tenant, keep)) == 2
        assert await store.count_transcript(tenant, keep) == 1
        assert len(await store.load_history(tenant, keep)) == 2
        assert await store.get_run(tenant, keep, "run-1") is not None
        assert (tenant, keep, "run-2") in unfinished

    async def test_delete_returns_true_then_false(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.delete_session(tenant, sid) is True
        assert await store.delete_session(tenant, sid) is False
        assert await store.delete_session(tenant, new_id()) is False

    async def test_a_config_change_is_stored_with_its_step_and_a_refused_step_changes_nothing(
        self, store: SessionStore
    ) -> None:
        tenant, sid = new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid))
        # Large enough to span several pages of a SQL store.
        changed = bump(record, config=replace(record.config, system_prompt="be thorough. " * 2000))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=changed))
        assert await store.get_session(tenant, sid) == changed
        same = bump(changed, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=same))
        assert await store.get_session(tenant, sid) == same
        # A step that says its config is as stored (the ledger's steps, mostly) stores the rest of its record.
        running = bump(same, state=SessionState.IDLE)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=running, config_unchanged=True))
        assert await store.get_session(tenant, sid) == running
        same = running

        stale = bump(record, config=replace(record.config, system_prompt="never stored"))
        with pytest.raises(VersionConflictError):
            await store.write(WriteBatch(tenant=tenant, session_id=sid, session=stale))
        assert await store.get_session(tenant, sid) == same
        listed = await store.list_sessions(tenant, SessionQuery(), after=None, limit=10)
        assert listed == [same]

    async def test_a_stale_step_is_a_version_conflict_even_when_its_rows_collide_with_the_stored_ones(
        self, store: SessionStore
    ) -> None:
        """Two copies numbered the same events and history: the one that lost the race learns it lost (and reloads),
        rather than failing on a duplicate key, and nothing of its step is stored."""
        tenant, sid = new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid))

        def step(text: str, state: SessionState) -> WriteBatch:
            return WriteBatch(
                tenant=tenant,
                session_id=sid,
                session=bump(record, state=state),
                events=[make_event(sid, 1, run_id=text)],
                history=[make_message(0, run_id=text)],
                runs=[make_run(tenant, sid, "run-1", request_id=text)],
                take_lease=text,
                lease_ttl_seconds=60,
            )

        await store.write(step("won", SessionState.RUNNING))
        with pytest.raises(VersionConflictError):
            await store.write(step("lost", SessionState.SUSPENDED))
        assert (await store.get_session(tenant, sid)) == bump(record, state=SessionState.RUNNING)
        assert [e.run_id for e in await all_events(store, tenant, sid)] == ["won"]
        assert [m.run_id for m in await store.load_history(tenant, sid)] == ["won"]
        run = await store.get_run(tenant, sid, "run-1")
        assert run is not None
        assert run.request_id == "won"

    async def test_count_sessions_follows_creates_and_deletes_per_tenant(self, store: SessionStore) -> None:
        tenant, other = new_tenant(), new_tenant()
        assert await store.count_sessions(tenant) == 0
        ids = [new_id() for _ in range(3)]
        for sid in ids:
            await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, new_id(), parent_session_id=ids[0]))  # children count too
        await create(store, make_session(other, ids[0]))
        with pytest.raises(SessionExistsError):
            await store.create_session(make_session(tenant, ids[1]))
        assert (await store.count_sessions(tenant), await store.count_sessions(other)) == (4, 1)

        assert await store.delete_session(tenant, ids[2]) is True
        assert await store.delete_session(tenant, ids[2]) is False
        assert await store.delete_session(tenant, new_id()) is False
        assert (await store.count_sessions(tenant), await store.count_sessions(other)) == (3, 1)
        await create(store, make_session(tenant, ids[2]))  # the same id again
        assert await store.count_sessions(tenant) == 4

    async def test_recreated_session_starts_empty(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                events=[make_event(sid, 1)],
                transcript=[make_entry(1)],
                history=[make_message(0)],
            )
        )
        await store.delete_session(tenant, sid)

        fresh = await create(store, make_session(tenant, sid, session_key="again"))
        assert await store.get_session(tenant, sid) == fresh
        assert await all_events(store, tenant, sid) == []
        assert await store.count_transcript(tenant, sid) == 0
        assert await store.load_history(tenant, sid) == []
