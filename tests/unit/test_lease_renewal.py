"""A lease renewal in flight when the run's last commit frees the lease extends nothing when it lands: the lease
stays free for another replica at once, a lease another replica took meanwhile stays theirs, and the run that
just ended is not reported lost (sessions/ownership.py, store/port.py `renew_lease`)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from general_agent_server.config.table import ServerSettings
from general_agent_server.sessions.ownership import Ownership
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.memory import InMemorySessionStore
from general_agent_server.store.testing.factories import make_session


class _GatedRenewals(InMemorySessionStore):
    """Holds `renew_lease` (the renewal's store write) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.renewing = asyncio.Event()
        self.proceed = asyncio.Event()

    async def renew_lease(self, *args: Any, **kwargs: Any) -> bool:
        self.renewing.set()
        await self.proceed.wait()
        return await super().renew_lease(*args, **kwargs)


async def _held_by_replica_a(store: InMemorySessionStore) -> tuple[Ownership, CoreSettings, list[str]]:
    """Replica A holding the lease of session s1, and the sessions it reports lost."""
    await store.open()
    await store.create_session(make_session("t", "s1"))
    settings = replace(ServerSettings().core(), replica_id="replica-a", lease_ttl_seconds=30.0)
    ownership = Ownership(store, settings)
    lost: list[str] = []
    ownership.lost = lambda tenant, session_id: lost.append(session_id)
    await ownership.take("t", "s1")
    return ownership, settings, lost


async def _renewal_in_flight(store: _GatedRenewals) -> tuple[Ownership, CoreSettings, asyncio.Future[None], list[str]]:
    ownership, settings, lost = await _held_by_replica_a(store)
    renewal = asyncio.ensure_future(ownership.renew())
    await store.renewing.wait()
    # The run's last commit frees the lease in its own transaction.
    await store.release_lease("t", "s1", "replica-a")
    return ownership, settings, renewal, lost


async def test_a_renewal_landing_after_the_release_leaves_the_lease_free() -> None:
    store = _GatedRenewals()
    ownership, settings, renewal, lost = await _renewal_in_flight(store)
    ownership.forget("t", "s1")
    store.proceed.set()
    await renewal
    assert await store.lease_holder("t", "s1") == ""
    assert not ownership.holds("t", "s1")
    assert await Ownership(store, replace(settings, replica_id="replica-b")).take("t", "s1") is not None
    assert lost == []


async def test_another_replica_taking_the_freed_lease_inside_the_window_keeps_it() -> None:
    store = _GatedRenewals()
    ownership, settings, renewal, lost = await _renewal_in_flight(store)
    ownership.forget("t", "s1")
    other = Ownership(store, replace(settings, replica_id="replica-b"))
    await other.take("t", "s1")
    store.proceed.set()
    await renewal
    assert await store.lease_holder("t", "s1") == "replica-b"
    assert lost == []


async def test_a_renewal_landing_before_the_forget_neither_takes_the_lease_nor_reports_it_lost() -> None:
    store = _GatedRenewals()
    _ownership, _settings, renewal, lost = await _renewal_in_flight(store)
    store.proceed.set()
    await renewal  # the commit's `forget` has not run yet
    assert await store.lease_holder("t", "s1") == ""
    assert lost == []


async def test_a_lease_another_replica_took_is_reported_lost() -> None:
    store = InMemorySessionStore()
    ownership, _settings, lost = await _held_by_replica_a(store)
    # This replica stalled past the TTL and replica-b took the expired lease.
    await store.release_lease("t", "s1", "replica-a")
    assert await store.acquire_lease("t", "s1", "replica-b", ttl_seconds=30.0)
    await ownership.renew()
    assert (lost, ownership.holds("t", "s1")) == (["s1"], False)
