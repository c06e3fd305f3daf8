"""InMemorySessionStore against the conformance suite, plus what only it offers (an injectable clock)."""

from __future__ import annotations

from pathlib import Path

from general_agent_server.store.memory import InMemorySessionStore
from general_agent_server.store.port import SessionStore
from general_agent_server.store.testing import SessionStoreConformance
from general_agent_server.store.testing.factories import make_session, new_id, new_tenant


class TestInMemoryStore(SessionStoreConformance):
    def make_store(self, directory: Path) -> SessionStore:
        return InMemorySessionStore()


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_leases_expire_by_the_injected_clock() -> None:
    clock = ManualClock()
    store = InMemorySessionStore(clock=clock)
    await store.open()
    tenant, sid = new_tenant(), new_id()
    await store.create_session(make_session(tenant, sid))
    assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=30) is True

    clock.now += 30
    assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=30) is False
    clock.now += 0.001
    assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=30) is True
    await store.close()


async def test_data_outlives_close_and_open() -> None:
    store = InMemorySessionStore()
    await store.open()
    record = make_session(new_tenant(), new_id())
    await store.create_session(record)
    await store.close()
    await store.open()
    assert await store.get_session(record.tenant, record.session_id) == record
    await store.close()
