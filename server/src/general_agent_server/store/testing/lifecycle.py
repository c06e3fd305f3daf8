"""The conformance tests of StoreLifecycle: a store serves reads and writes only while open."""

from __future__ import annotations

from pathlib import Path

import pytest

from general_agent_server.store.port import SessionStore, StoreError, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import make_session, new_id, new_tenant


async def _assert_closed(store: SessionStore) -> None:
    tenant, sid = new_tenant(), new_id()
    with pytest.raises(StoreError):
        await store.write(WriteBatch(tenant=tenant, session_id=sid))
    with pytest.raises(StoreError):
        await store.write(WriteBatch(tenant=tenant, session_id=sid), durable=False)
    with pytest.raises(StoreError):
        await store.create_session(make_session(tenant, sid))
    with pytest.raises(StoreError):
        await store.get_session(tenant, sid)
    with pytest.raises(StoreError):
        await store.read_events(tenant, sid, after_sequence=0, limit=1)


@async_tests
class StoreLifecycleConformance(StoreConformance):
    """open and close, on stores the tests open themselves (from `make_store`)."""

    async def test_reads_and_writes_before_open_raise_store_error(self, tmp_path: Path) -> None:
        await _assert_closed(self.make_store(tmp_path))

    async def test_reads_and_writes_after_close_raise_store_error(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        await store.open()
        tenant, sid = new_tenant(), new_id()
        await store.create_session(make_session(tenant, sid))
        assert await store.get_session(tenant, sid) == make_session(tenant, sid)
        await store.close()
        await _assert_closed(store)
