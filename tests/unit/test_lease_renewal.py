"""A lease renewal in flight when the run's last commit frees the lease (and the ownership forgets it) lands after
that commit and takes the lease again; the ownership then frees it at once, so another replica can start a run
without waiting for the lease to expire (sessions/ownership.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from general_agent_server.config.table import ServerSettings
from general_agent_server.sessions.ownership import Ownership
from general_agent_server.store.memory import InMemorySessionStore
from general_agent_server.store.testing.factories import make_session


class _GatedRenewals(InMemorySessionStore):
    """Holds `acquire_lease` (the renewal's take) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.renewing = asyncio.Event()
        self.proceed = asyncio.Event()

    async def acquire_lease(self, *args: Any, **kwargs: Any) -> bool:
        self.renewing.set()
        await self.proceed.wait()
        return await super().acquire_lease(*args, **kwargs)


async def test_a_renewal_landing_after_the_release_frees_the_lease_again() -> None:
    store = _GatedRenewals()
    await store.open()
    await store.create_session(make_session("t", "s1"))
    settings = replace(ServerSettings().core(), replica_id="replica-a", lease_ttl_seconds=30.0)
    ownership = Ownership(store, settings)
    await ownership.take("t", "s1")
    renewal = asyncio.ensure_future(ownership.renew())
    await store.renewing.wait()
    # The run's last commit frees the lease in its own transaction; the ownership forgets it.
    await store.release_lease("t", "s1", "replica-a")
    ownership.forget("t", "s1")
    store.proceed.set()
    await renewal
    await ownership.settle("t", "s1")  # the release the renewal's late take called for
    assert not ownership.holds("t", "s1")
    other = replace(settings, replica_id="replica-b")
    assert await Ownership(store, other).take("t", "s1") is not None
