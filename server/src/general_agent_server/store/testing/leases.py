"""The conformance tests of LeaseStore: session leases with a TTL, and notify."""

from __future__ import annotations

import asyncio

import pytest

from general_agent_server.domain.session import SessionState
from general_agent_server.store.port import SessionStore, VersionConflictError, WriteBatch
from general_agent_server.store.testing.base import StoreConformance, async_tests
from general_agent_server.store.testing.factories import (
    bump,
    make_event,
    make_message,
    make_session,
    new_id,
    new_tenant,
)
from general_agent_server.store.testing.helpers import all_events, create


@async_tests
class LeaseConformance(StoreConformance):
    """One owner until expiry, renewal, release by the owner only; leases never touch the record."""

    async def test_lease_is_exclusive_while_unexpired(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False

    async def test_lease_owner_renews(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=0.01) is True
        # Renewing extends the expiry: after the first TTL has passed the lease still holds.
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        await asyncio.sleep(0.05)
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

    async def test_renew_extends_only_a_lease_the_owner_holds(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        # A free lease is not taken by a renewal: it stays free for anyone.
        assert await store.renew_lease(tenant, sid, "owner-a", ttl_seconds=60) is False
        assert await store.lease_holder(tenant, sid) == ""
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=0.01) is True
        await asyncio.sleep(0.05)  # past the TTL, but nobody took it: the owner renews it
        assert await store.renew_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.renew_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.lease_holder(tenant, sid) == "owner-a"

    async def test_renew_after_release_or_takeover_leaves_the_lease_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        await store.release_lease(tenant, sid, "owner-a")
        assert await store.renew_lease(tenant, sid, "owner-a", ttl_seconds=60) is False
        assert await store.lease_holder(tenant, sid) == ""
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        assert await store.renew_lease(tenant, sid, "owner-a", ttl_seconds=60) is False
        assert await store.lease_holder(tenant, sid) == "owner-b"

    async def test_renew_leaves_the_session_record_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        before = await store.get_session(tenant, sid)
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.renew_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.get_session(tenant, sid) == before
        assert await store.renew_lease(tenant, new_id(), "owner-a", ttl_seconds=60) is False

    async def test_expired_lease_can_be_taken_over(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=0.01) is True
        await asyncio.sleep(0.05)  # let the TTL pass
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        # B holds it now; A lost it.
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is False

    async def test_release_by_non_owner_does_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

        assert await store.release_lease(tenant, sid, "owner-b") is None  # type: ignore[func-returns-value]

        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

    async def test_release_by_owner_frees_the_lease(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

        await store.release_lease(tenant, sid, "owner-a")

        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is False

    async def test_lease_is_scoped_by_tenant_and_session(self, store: SessionStore) -> None:
        tenant_a, tenant_b, sid, sid2 = new_tenant(), new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant_a, sid))
        await create(store, make_session(tenant_a, sid2))
        await create(store, make_session(tenant_b, sid))
        assert await store.acquire_lease(tenant_a, sid, "owner-a", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant_b, sid, "owner-b", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant_a, sid2, "owner-b", ttl_seconds=60) is True
        # Releasing in one tenant does not free the other.
        await store.release_lease(tenant_b, sid, "owner-b")
        assert await store.acquire_lease(tenant_a, sid, "owner-b", ttl_seconds=60) is False

    async def test_lease_operations_leave_the_session_record_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.get_session(tenant, sid) == v1

        # A CAS write by the lease holder is unaffected by the lease (version 1 -> 2).
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2))
        assert await store.get_session(tenant, sid) == v2
        await store.release_lease(tenant, sid, "owner-a")
        assert await store.get_session(tenant, sid) == v2

    async def test_taking_a_lease_reads_the_sessions_version_in_the_same_write(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.take_lease(tenant, sid, "owner-a", ttl_seconds=60) == v1.version
        assert await store.take_lease(tenant, sid, "owner-b", ttl_seconds=60) is None  # held by A
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2, release_lease="owner-a"))
        # Released by the batch; the next take sees the version that batch committed.
        assert await store.take_lease(tenant, sid, "owner-b", ttl_seconds=60) == v2.version
        assert await store.take_lease(tenant, sid, "owner-b", ttl_seconds=60) == v2.version  # a renewal
        assert await store.take_lease(tenant, new_id(), "owner-b", ttl_seconds=60) is None  # no such session

    async def test_notify_is_callable_and_returns_none(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        result = await store.notify(tenant, sid, 5)  # type: ignore[func-returns-value]
        assert result is None
        # It changes no state.
        assert await store.get_session(tenant, sid) == make_session(tenant, sid)
        assert await all_events(store, tenant, sid) == []

    async def test_a_session_that_does_not_exist_cannot_be_leased(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is False
        await store.release_lease(tenant, sid, "owner-a")
        assert await store.get_session(tenant, sid) is None
        # Created later, it starts unleased.
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True

    async def test_a_batch_releases_its_owners_lease_with_its_commit(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        # Another owner's name frees nothing.
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2, release_lease="owner-b"))
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        # The owner's own batch frees it atomically with the state it commits.
        v3 = bump(v2, state=SessionState.IDLE)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v3, release_lease="owner-a"))
        assert await store.get_session(tenant, sid) == v3
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True

    async def test_a_batch_that_fails_its_compare_and_set_keeps_the_lease(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        stale = bump(bump(v1))
        with pytest.raises(VersionConflictError):
            await store.write(WriteBatch(tenant=tenant, session_id=sid, session=stale, release_lease="owner-a"))
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False

    async def test_a_batch_takes_the_lease_with_its_step(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1, state=SessionState.RUNNING)
        batch = WriteBatch(tenant=tenant, session_id=sid, session=v2, take_lease="owner-a", lease_ttl_seconds=60)
        await store.write(batch)
        assert await store.get_session(tenant, sid) == v2
        assert await store.lease_holder(tenant, sid) == "owner-a"
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        # The owner's own lease is no obstacle: its next step may take it again (a renewal).
        v3 = bump(v2)
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid, session=v3, take_lease="owner-a", lease_ttl_seconds=60)
        )
        assert await store.lease_holder(tenant, sid) == "owner-a"

    async def test_a_batch_cannot_take_a_lease_another_owner_holds_and_writes_nothing(
        self, store: SessionStore
    ) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        batch = WriteBatch(
            tenant=tenant,
            session_id=sid,
            session=bump(v1, state=SessionState.RUNNING),
            events=[make_event(sid, 1)],
            history=[make_message(0)],
            take_lease="owner-a",
            lease_ttl_seconds=60,
        )
        with pytest.raises(VersionConflictError):
            await store.write(batch)
        assert await store.get_session(tenant, sid) == v1
        assert await all_events(store, tenant, sid) == []
        assert await store.load_history(tenant, sid) == []
        assert await store.lease_holder(tenant, sid) == "owner-b"

    async def test_a_batch_taking_a_free_lease_over_a_changed_version_writes_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        stale = bump(bump(v1), state=SessionState.RUNNING)
        batch = WriteBatch(
            tenant=tenant,
            session_id=sid,
            session=stale,
            events=[make_event(sid, 1)],
            take_lease="owner-a",
            lease_ttl_seconds=60,
        )
        with pytest.raises(VersionConflictError, match="expected stored version"):
            await store.write(batch)
        assert await store.get_session(tenant, sid) == v1
        assert await all_events(store, tenant, sid) == []
        assert await store.lease_holder(tenant, sid) == ""

    async def test_a_conflict_over_the_lease_says_so(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        batch = WriteBatch(tenant=tenant, session_id=sid, session=bump(v1), take_lease="owner-a", lease_ttl_seconds=60)
        with pytest.raises(VersionConflictError, match="another owner holds its lease"):
            await store.write(batch)

    async def test_a_batch_may_take_and_release_the_lease_at_once(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1)
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                session=v2,
                take_lease="owner-a",
                lease_ttl_seconds=60,
                release_lease="owner-a",
            )
        )
        assert await store.get_session(tenant, sid) == v2
        assert await store.lease_holder(tenant, sid) == ""

    async def test_a_batch_takes_over_an_expired_lease(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=0.01) is True
        await asyncio.sleep(0.05)  # let the TTL pass
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid, session=v2, take_lease="owner-a", lease_ttl_seconds=60)
        )
        assert await store.get_session(tenant, sid) == v2
        assert await store.lease_holder(tenant, sid) == "owner-a"
