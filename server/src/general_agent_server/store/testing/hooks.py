"""The conformance tests of HookRegistrationStore: remote hook registration documents."""

from __future__ import annotations

import pytest

from general_agent_server.store.port import SessionExistsError, SessionStore, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import make_session, new_id, new_tenant
from general_agent_server.store.testing.helpers import create


@async_tests
class HookRegistrationConformance(StoreConformance):
    """put, replace, list and delete registrations; a session's go with it."""

    async def test_hook_registrations_put_replace_list_delete(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        await store.put_hook_registration(tenant, "", "wide", '{"v": 1}')
        await store.put_hook_registration(tenant, sid, "mine", '{"v": 1}')
        await store.put_hook_registration(tenant, sid, "mine", '{"v": 2}')  # replaced, not added
        rows = sorted(r for r in await store.list_hook_registrations() if r[0] == tenant)
        assert rows == [(tenant, "", "wide", '{"v": 1}'), (tenant, sid, "mine", '{"v": 2}')]
        assert await store.delete_hook_registration(tenant, "", "wide") is True
        assert await store.delete_hook_registration(tenant, "", "wide") is False
        assert await store.delete_hook_registration(new_tenant(), sid, "mine") is False  # other tenant: untouched
        # Deleting the session removes its registrations.
        await store.delete_session(tenant, sid)
        assert [r for r in await store.list_hook_registrations() if r[0] == tenant] == []

    async def test_registrations_are_listed_by_scope(self, store: SessionStore) -> None:
        tenant, other, sid, sid2 = new_tenant(), new_tenant(), new_id(), new_id()
        for t, s in ((tenant, sid), (tenant, sid2), (other, sid)):
            await create(store, make_session(t, s))
            await store.put_hook_registration(t, s, "b", "{}")
            await store.put_hook_registration(t, s, "a", "{}")
        await store.put_hook_registration(tenant, "", "wide", "{}")
        assert await store.list_hook_registrations((tenant, sid)) == [
            (tenant, sid, "a", "{}"),
            (tenant, sid, "b", "{}"),
        ]
        assert await store.list_hook_registrations((tenant, "")) == [(tenant, "", "wide", "{}")]
        assert await store.list_hook_registrations((tenant, new_id())) == []
        assert [r[:2] for r in await store.list_hook_registrations((other, sid))] == [(other, sid), (other, sid)]

    async def test_create_with_batch_stores_the_sessions_hook_registrations(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        batch = WriteBatch(tenant=tenant, session_id=sid, hook_registrations=[("p1", '{"a": 1}'), ("p2", "{}")])
        await store.create_session(make_session(tenant, sid), batch=batch)
        rows = sorted(r for r in await store.list_hook_registrations() if r[0] == tenant)
        assert rows == [(tenant, sid, "p1", '{"a": 1}'), (tenant, sid, "p2", "{}")]
        with pytest.raises(SessionExistsError):
            await store.create_session(
                make_session(tenant, sid),
                batch=WriteBatch(tenant=tenant, session_id=sid, hook_registrations=[("p3", "{}")]),
            )
        assert sorted(r[2] for r in await store.list_hook_registrations() if r[0] == tenant) == ["p1", "p2"]
