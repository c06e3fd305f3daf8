"""Which replica owns a session: the store lease, held only while one of its runs is active (docs/architecture.md,
"Replicas and leases").

A replica takes a session's lease when a run starts or a suspended run continues, renews (extends, never takes)
it every third of `lease_ttl_seconds` while the run's task is alive, and releases it when the run ends or
suspends. Idle and suspended sessions belong to no one: any replica loads them. Another replica's run is never
touched while its lease is live; once a dead owner's lease has expired, the first replica that finds the run (the
sweep here, a load, or start-up) repairs it as start-up recovery does (runs/recovery.py).

Releases of one session are ordered with its next take: a take waits for a release still in flight, so a lease
released at the end of one run never frees the lease the next run has just taken."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.runs.recovery import repair_abandoned_runs
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore

logger = logging.getLogger(__name__)

# A relayed command answered or claimed this long ago has no sender waiting any more (a sender reads its
# answer within a poll interval, sessions/relay.py); the sweep purges it.
COMMAND_RETENTION = timedelta(hours=1)

_Key = tuple[str, str]


def held_elsewhere(session_id: str, retry_after_seconds: float) -> ServiceError:
    """What a command gets for a session whose run another replica drives (REJECT's answer on one server)."""
    return ServiceError(
        ErrorCode.FAILED_PRECONDITION,
        "SESSION_BUSY",
        f"session {session_id!r} has an active run on another server replica; retry when it finishes",
        metadata={"session_id": session_id, "state": "RUNNING"},
        retry_after_seconds=retry_after_seconds,
    )


class Ownership:
    """The leases this replica holds (see the module docstring). `lost` is called with a session whose lease
    another replica took (this replica stalled past the TTL): its run must stop, its writes would conflict."""

    def __init__(self, store: SessionStore, settings: CoreSettings) -> None:
        self._store = store
        self._settings = settings
        self._held: set[_Key] = set()
        self._releasing: dict[_Key, asyncio.Task[None]] = {}
        self._renewer: asyncio.Task[None] | None = None
        self.lost: Callable[[str, str], None] = lambda tenant, session_id: None

    @property
    def owner(self) -> str:
        return self._settings.replica_id

    @property
    def ttl(self) -> float:
        return self._settings.lease_ttl_seconds

    @property
    def holding(self) -> bool:
        """Whether this replica holds any lease now."""
        return bool(self._held)

    def holds(self, tenant: str, session_id: str) -> bool:
        return (tenant, session_id) in self._held

    async def take(self, tenant: str, session_id: str) -> int:
        """Takes (or renews) the lease, or fails SESSION_BUSY while another replica holds a live one; the
        session's stored version, read in the lease's own write."""
        key = (tenant, session_id)
        await self.settle(tenant, session_id)
        version = await self._store.take_lease(tenant, session_id, self.owner, ttl_seconds=self.ttl)
        if version is None:
            raise held_elsewhere(session_id, self.ttl / 3)
        self._held.add(key)
        return version

    async def settle(self, tenant: str, session_id: str) -> None:
        """Waits for a release of the session's lease still in flight, so it never frees a lease taken after it."""
        releasing = self._releasing.get((tenant, session_id))
        if releasing is not None:
            await asyncio.shield(releasing)

    def adopt(self, tenant: str, session_id: str) -> None:
        """A commit took the lease (WriteBatch.take_lease): it is held here from now on, renewed with the others."""
        self._held.add((tenant, session_id))

    def forget(self, tenant: str, session_id: str) -> None:
        """The lease was freed by a commit already (the run's last batch): it is no longer held here."""
        self._held.discard((tenant, session_id))

    def release(self, tenant: str, session_id: str) -> None:
        """Frees the lease in the background (a run's task is ending); the next take waits for it."""
        key = (tenant, session_id)
        if key not in self._held:
            return
        self._held.discard(key)
        # The store write runs after any release still in flight, registered so that `settle` waits for it.
        previous = self._releasing.get(key)

        async def release() -> None:
            if previous is not None:
                await previous
            await self._release_now(key)

        task = asyncio.create_task(release(), name=f"release-lease-{key[1]}")
        self._releasing[key] = task
        task.add_done_callback(
            lambda done: self._releasing.pop(key, None) if self._releasing.get(key) is done else None
        )

    async def _release_now(self, key: _Key) -> None:
        try:
            await self._store.release_lease(*key, self.owner)
        except Exception:
            logger.exception("could not release the lease of session %s", key[1], extra={"category": "system"})

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_and_sweep(), name="lease-renewal")

    async def close(self) -> None:
        """Stops renewing and releases every lease still held (the process is going away)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        await asyncio.gather(*self._releasing.values(), return_exceptions=True)
        for key in sorted(self._held):
            await self._release_now(key)
        self._held.clear()

    async def _renew_and_sweep(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            await self.renew()
            await self.sweep()

    async def renew(self) -> None:
        """Extends every lease held here. A renewal never takes a lease: one freed while it was in flight (the
        run's last commit released it) stays free, and only a lease another owner holds now counts as lost."""
        for key in sorted(self._held):
            try:
                renewed = await self._store.renew_lease(*key, self.owner, ttl_seconds=self.ttl)
                if renewed or key not in self._held:
                    continue
                holder = await self._store.lease_holder(*key)
            except Exception:
                logger.exception("lease renewal failed", extra={"category": "system"})
                continue
            # A free lease under a run held here is the run's last commit landing ahead of its `forget`.
            if holder not in ("", self.owner) and key in self._held:
                logger.warning("lost the lease of session %s", key[1], extra={"category": "system"})
                self._held.discard(key)
                self.lost(*key)

    async def sweep(self) -> int:
        """Repairs the runs of dead owners whose leases have expired, and purges relayed commands nobody will
        collect (store/port.py, purge_commands); the number of runs repaired."""
        try:
            await self._store.purge_commands(older_than=datetime.now(UTC) - COMMAND_RETENTION)
        except Exception:
            logger.exception("purging relayed commands failed", extra={"category": "system"})
        try:
            return await repair_abandoned_runs(
                self._store,
                owner=self.owner,
                ttl_seconds=self.ttl,
                sequence_block=self._settings.sequence_block,
                skip=self._held,
            )
        except Exception:
            logger.exception("sweeping abandoned runs failed", extra={"category": "system"})
            return 0
