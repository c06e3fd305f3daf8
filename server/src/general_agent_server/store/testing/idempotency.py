"""The conformance tests of IdempotencyStore: idempotency keys."""

from __future__ import annotations

from general_agent_server.store.port import SessionStore, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import at, bump, make_idempotency, make_session, new_id, new_tenant
from general_agent_server.store.testing.helpers import create


@async_tests
class IdempotencyConformance(StoreConformance):
    """Records round-trip, scoped by tenant and RPC, also written in a batch."""

    async def test_idempotency_round_trip(self, store: SessionStore) -> None:
        tenant = new_tenant()
        record = make_idempotency(tenant, "CreateSession", "req-1", result='{"session_id": "abc", "n": [1, 2]}')
        assert await store.get_idempotency(tenant, "CreateSession", "req-1") is None

        await store.put_idempotency(record)

        got = await store.get_idempotency(tenant, "CreateSession", "req-1")
        assert got == record
        assert got is not None
        assert got.body_hash == "hash-CreateSession-req-1"
        assert got.result_json == '{"session_id": "abc", "n": [1, 2]}'
        assert got.create_time == at(3)

    async def test_idempotency_is_scoped_by_tenant_and_rpc(self, store: SessionStore) -> None:
        tenant_a, tenant_b = new_tenant(), new_tenant()
        a_create = make_idempotency(tenant_a, "CreateSession", "req-1", result='"a-create"')
        a_delete = make_idempotency(tenant_a, "DeleteSession", "req-1", result='"a-delete"')
        b_create = make_idempotency(tenant_b, "CreateSession", "req-1", result='"b-create"')
        await store.put_idempotency(a_create)
        await store.put_idempotency(a_delete)
        await store.put_idempotency(b_create)

        assert await store.get_idempotency(tenant_a, "CreateSession", "req-1") == a_create
        assert await store.get_idempotency(tenant_a, "DeleteSession", "req-1") == a_delete
        assert await store.get_idempotency(tenant_b, "CreateSession", "req-1") == b_create
        assert await store.get_idempotency(tenant_b, "DeleteSession", "req-1") is None
        assert await store.get_idempotency(tenant_a, "ForkSession", "req-1") is None
        assert await store.get_idempotency(tenant_a, "CreateSession", "req-2") is None

    async def test_idempotency_written_in_a_batch(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        record = make_idempotency(tenant, "ResumeSession", "req-9", result='{"ok": true}')
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=bump(v1), idempotency=record))
        assert await store.get_idempotency(tenant, "ResumeSession", "req-9") == record
