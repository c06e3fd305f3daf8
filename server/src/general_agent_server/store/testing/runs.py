"""The conformance tests of RunStore: runs and tool calls."""

from __future__ import annotations

from dataclasses import replace

from general_agent_server.domain.events import RunOutcome, RunReason, RunTrigger
from general_agent_server.domain.records import CallKind, CallStatus, RunStatus
from general_agent_server.domain.session import Usage
from general_agent_server.store.port import SessionStore, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import at, make_run, make_session, make_tool_call, new_id, new_tenant
from general_agent_server.store.testing.helpers import create


@async_tests
class RunStoreConformance(StoreConformance):
    """Runs and tool calls written through batches, read back by key, request id and status."""

    async def test_run_round_trip(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        running = make_run(tenant, sid, "run-1", request_id="req-1")
        finished = make_run(tenant, sid, "run-2", status=RunStatus.FINISHED, request_id="req-2")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[running, finished]))

        assert await store.get_run(tenant, sid, "run-1") == running
        got = await store.get_run(tenant, sid, "run-2")
        assert got == finished
        assert got is not None
        assert got.outcome is RunOutcome.COMPLETED
        assert got.reason is RunReason.PROVIDER_ERROR
        assert got.finished_at == at(2)
        assert got.started_at == at(1)
        assert got.trigger is RunTrigger.ENQUEUED_TURN
        assert got.usage == Usage(input_tokens=5, output_tokens=6, cache_read_input_tokens=7, model_calls=2)

        assert await store.get_run(tenant, sid, "run-unknown") is None
        assert await store.get_run(new_tenant(), sid, "run-1") is None
        assert await store.get_run(tenant, new_id(), "run-1") is None

    async def test_writing_a_run_again_updates_it(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        run = make_run(tenant, sid, "run-1", request_id="req-1")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[run]))

        done = replace(
            run,
            status=RunStatus.FINISHED,
            outcome=RunOutcome.FAILED,
            reason=RunReason.INTERRUPTED,
            last_sequence=17,
            finished_at=at(30),
        )
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[done]))

        assert await store.get_run(tenant, sid, "run-1") == done
        assert await store.find_run_by_request_id(tenant, sid, "req-1") == done
        unfinished = [r for r in await store.list_unfinished_runs() if r.tenant == tenant]
        assert unfinished == []

    async def test_find_run_by_request_id(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        run_a = make_run(tenant, sid, "run-a", request_id="req-a")
        run_b = make_run(tenant, sid, "run-b", status=RunStatus.FINISHED, request_id="req-b")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[run_a, run_b]))

        assert await store.find_run_by_request_id(tenant, sid, "req-a") == run_a
        assert await store.find_run_by_request_id(tenant, sid, "req-b") == run_b
        assert await store.find_run_by_request_id(tenant, sid, "req-unknown") is None
        assert await store.find_run_by_request_id(new_tenant(), sid, "req-a") is None
        assert await store.find_run_by_request_id(tenant, new_id(), "req-a") is None

    async def test_list_unfinished_runs_spans_tenants_and_skips_finished(self, store: SessionStore) -> None:
        tenant_a, tenant_b, sid = new_tenant(), new_tenant(), new_id()
        await create(store, make_session(tenant_a, sid))
        await create(store, make_session(tenant_b, sid))
        a_running = make_run(tenant_a, sid, "run-1", status=RunStatus.RUNNING)
        a_finished = make_run(tenant_a, sid, "run-2", status=RunStatus.FINISHED)
        b_suspended = make_run(tenant_b, sid, "run-1", status=RunStatus.SUSPENDED)
        b_finished = make_run(tenant_b, sid, "run-3", status=RunStatus.FINISHED)
        await store.write(WriteBatch(tenant=tenant_a, session_id=sid, runs=[a_running, a_finished]))
        await store.write(WriteBatch(tenant=tenant_b, session_id=sid, runs=[b_suspended, b_finished]))

        ours = [r for r in await store.list_unfinished_runs() if r.tenant in (tenant_a, tenant_b)]

        key = lambda r: (r.tenant, r.session_id, r.run_id)  # noqa: E731
        assert sorted(ours, key=key) == sorted([a_running, b_suspended], key=key)
        assert {r.status for r in ours} == {RunStatus.RUNNING, RunStatus.SUSPENDED}

    async def test_list_runs_in_start_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        first = replace(make_run(tenant, sid, "run-a"), first_sequence=9)
        second = replace(make_run(tenant, sid, "run-b"), first_sequence=2)
        third = replace(make_run(tenant, sid, "run-c"), first_sequence=5)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[first, second]))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[third]))

        assert await store.list_runs(tenant, sid) == [second, third, first]
        assert await store.list_runs(new_tenant(), sid) == []
        assert await store.list_runs(tenant, new_id()) == []

    async def test_tool_calls_round_trip_in_round_then_position_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        calls = [
            make_tool_call(tenant, sid, "run-1", "call-c", round_index=1, position=0, resolved=True),
            make_tool_call(tenant, sid, "run-1", "call-a", round_index=0, position=1, kind=CallKind.HOSTED),
            make_tool_call(tenant, sid, "run-1", "call-b", round_index=0, position=0),
            make_tool_call(tenant, sid, "run-2", "call-d"),
        ]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, tool_calls=calls))

        assert await store.list_tool_calls(tenant, sid, "run-1") == [calls[2], calls[1], calls[0]]
        assert await store.list_tool_calls(tenant, sid, "run-2") == [calls[3]]
        assert await store.list_tool_calls(tenant, sid, "run-3") == []
        assert await store.list_tool_calls(new_tenant(), sid, "run-1") == []
        assert await store.get_tool_call(tenant, sid, "call-c") == calls[0]
        assert await store.get_tool_call(tenant, sid, "call-x") is None
        assert await store.get_tool_call(new_tenant(), sid, "call-c") is None

    async def test_writing_a_tool_call_again_resolves_it(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        pending = make_tool_call(tenant, sid, "run-1", "call-1", kind=CallKind.HOSTED)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, tool_calls=[pending]))
        resolved = make_tool_call(tenant, sid, "run-1", "call-1", kind=CallKind.HOSTED, resolved=True)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, tool_calls=[resolved]))

        assert await store.get_tool_call(tenant, sid, "call-1") == resolved
        assert await store.list_tool_calls(tenant, sid, "run-1") == [resolved]
        assert [c for c in await store.list_waiting_calls() if c.tenant == tenant] == []

    async def test_pending_hosted_calls_span_tenants_and_skip_local_and_resolved(self, store: SessionStore) -> None:
        tenant_a, tenant_b = sorted([new_tenant(), new_tenant()])
        sid = new_id()
        for tenant in (tenant_a, tenant_b):
            await create(store, make_session(tenant, sid))
        hosted = CallKind.HOSTED
        b_late = make_tool_call(tenant_b, sid, "run-1", "call-1", round_index=2, kind=hosted)
        b_early = make_tool_call(tenant_b, sid, "run-1", "call-2", round_index=1, position=3, kind=hosted)
        a_only = make_tool_call(tenant_a, sid, "run-1", "call-3", kind=hosted)
        others = [
            make_tool_call(tenant_a, sid, "run-1", "call-4"),  # local
            make_tool_call(tenant_a, sid, "run-1", "call-5", kind=hosted, resolved=True),
        ]
        await store.write(WriteBatch(tenant=tenant_b, session_id=sid, tool_calls=[b_late, b_early]))
        await store.write(WriteBatch(tenant=tenant_a, session_id=sid, tool_calls=[a_only, *others]))

        pending = [c for c in await store.list_waiting_calls() if c.tenant in (tenant_a, tenant_b)]

        assert pending == [a_only, b_early, b_late]
        assert {c.status for c in pending} == {CallStatus.PENDING}

    async def test_calls_awaiting_approval_are_waiting_calls_of_any_kind(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        local = make_tool_call(tenant, sid, "run-1", "call-1", position=0, awaiting_approval=True)
        hosted = make_tool_call(tenant, sid, "run-1", "call-2", position=1, kind=CallKind.HOSTED)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, tool_calls=[hosted, local]))

        waiting = [c for c in await store.list_waiting_calls() if c.tenant == tenant]

        assert waiting == [local, hosted]
        assert waiting[0].status is CallStatus.AWAITING_APPROVAL
        assert waiting[0].approval == local.approval
        assert await store.get_tool_call(tenant, sid, "call-1") == local

    async def test_delete_session_removes_its_tool_calls(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        call = make_tool_call(tenant, sid, "run-1", "call-1", kind=CallKind.HOSTED)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, tool_calls=[call]))

        await store.delete_session(tenant, sid)

        assert await store.get_tool_call(tenant, sid, "call-1") is None
        assert await store.list_tool_calls(tenant, sid, "run-1") == []
        assert [c for c in await store.list_waiting_calls() if c.tenant == tenant] == []
