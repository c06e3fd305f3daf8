"""How one loaded session stays right while other replicas share its store (docs/architecture.md, "Replicas and
leases").

Invariants:
- A replica owns a session only while a run of it executes here: `owns_run` is exactly "the run's task is
  alive here", and only then does this replica hold the session's lease (sessions/ownership.py). The lease is
  taken before a run starts or a suspended run continues, and the state is read again under it, so no other
  replica starts or continues a run meanwhile; it is released when the run's task ends (finished or suspended).
- While a run executes here nobody else writes the session: the copy in memory is the truth and is never read
  again. Otherwise the copy may be stale, so every use compares it with the store's version first
  (`revalidate`), and reads the session again when it differs.
- A copy whose stored state says RUNNING while no run executes here belongs to another replica's run: it never
  writes (`check_writable` refuses every commit SESSION_BUSY), and once that replica's lease has expired the
  run is repaired as start-up recovery does (runs/recovery.py) by the first replica that finds it.
- A suspended run has no owner: any replica reads its run row and pending round back from the store and
  re-arms its hosted deadlines (`restore_stored_suspension`)."""

from __future__ import annotations

import asyncio
import weakref

from general_agent_server.domain.errors import session_not_found
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.runs.recovery import repair_leased, repair_session
from general_agent_server.runs.state import ActiveRun
from general_agent_server.sessions.loaded import LoadedSession
from general_agent_server.sessions.ownership import held_elsewhere


class ReplicaSync:
    """See the module docstring. `lock` is the session's command lock."""

    def __init__(self, session: LoadedSession, lock: asyncio.Lock) -> None:
        # Weak: the session owns this object, and an evicted session must be freed without the cycle collector.
        self._ref = weakref.ref(session)
        self._lock = lock

    @property
    def _session(self) -> LoadedSession:
        session = self._ref()
        if session is None:
            raise ReferenceError("the session was freed")
        return session

    @property
    def owns_run(self) -> bool:
        """Whether a run of this session executes here now (this replica holds the lease)."""
        run = self._session.run
        return run is not None and run.task is not None and not run.task.done()

    @property
    def runs_elsewhere(self) -> bool:
        """The stored state says RUNNING, and the run is not here: another replica drives it."""
        return self._session.record.state is SessionState.RUNNING and not self.owns_run

    def check_writable(self) -> None:
        if self.runs_elsewhere:
            session = self._session
            raise held_elsewhere(session.session_id, session.settings.lease_ttl_seconds / 3)

    async def own_run(self) -> int | None:
        """Takes the session's lease for a run starting or continuing here (SESSION_BUSY while another replica
        holds it): the stored version read with the take (for `revalidate_locked`), None when it was held."""
        session = self._session
        ownership = session.deps.ownership
        if ownership.holds(session.tenant, session.session_id):
            return None
        version = await ownership.take(session.tenant, session.session_id)
        session.ledger.lease_released = False
        return version

    def disown_run(self) -> None:
        """Releases the lease unless a run executes here; without a store write of its own when the run's last
        commit freed it in the same transaction (store/port.py, WriteBatch.release_lease)."""
        if not self.owns_run:
            session = self._session
            ownership = session.deps.ownership
            if session.ledger.lease_released:
                session.ledger.lease_released = False
                ownership.forget(session.tenant, session.session_id)
            else:
                ownership.release(session.tenant, session.session_id)

    async def revalidate(self) -> bool:
        """Compares the copy with the store's version and reads the session again when another replica changed
        it (and repairs a run a dead replica left); True when it was read again. NOT_FOUND once it is deleted."""
        if self.owns_run or await self._current() is None:
            return False  # the common case, without the command lock
        async with self._lock:
            return await self.revalidate_locked()

    async def revalidate_locked(self, taken_version: int | None = None) -> bool:
        """`revalidate` with the command lock already held; `taken_version` is what `own_run` read with the
        lease just now (a copy at that version is current without reading the row again)."""
        stored = await self._current(taken_version)
        if stored is None:
            return False
        session = self._session
        store, tenant, session_id = session.store, session.tenant, session.session_id
        if stored.state is SessionState.RUNNING:
            if await self._repair():
                stored = await store.get_session(tenant, session_id)
                if stored is None:
                    raise session_not_found(session_id)
            elif stored.version == session.record.version and not session.ledger.stale:
                return False  # still running elsewhere, and this copy knows it
        history = await store.load_history(tenant, session_id)
        session.deadlines.disarm()
        session.run = None
        session.ledger.reload(stored, history)
        session.tools.invalidate()
        if stored.state is SessionState.SUSPENDED and stored.active_run_id:
            await self.restore_stored_suspension()
        return True

    async def _current(self, taken_version: int | None = None) -> SessionRecord | None:
        """The stored record when it differs from this copy or says RUNNING elsewhere; None when the copy is
        current or a run executes here (this replica holds the lease: nobody else writes the session). NOT_FOUND
        once it is deleted."""
        if self.owns_run:
            return None
        session = self._session
        if (
            taken_version == session.record.version
            and not session.ledger.stale
            and session.record.state is not SessionState.RUNNING
        ):
            return None  # the version read with the lease, under it: the copy is current
        stored = await session.store.get_session(session.tenant, session.session_id)
        if stored is None:
            raise session_not_found(session.session_id)
        current = stored.version == session.record.version and not session.ledger.stale
        if current and stored.state is not SessionState.RUNNING:
            return None
        return stored  # changed, or a run elsewhere that may have been abandoned since (repaired once expired)

    async def _repair(self) -> bool:
        """A run left RUNNING by a replica whose lease has expired (or this replica's own before a restart)."""
        session = self._session
        settings, store, tenant, session_id = session.settings, session.store, session.tenant, session.session_id
        if session.deps.ownership.holds(tenant, session_id):
            return await repair_leased(store, tenant, session_id, settings.sequence_block) > 0
        repaired = await repair_session(
            store,
            tenant,
            session_id,
            owner=settings.replica_id,
            ttl_seconds=settings.lease_ttl_seconds,
            sequence_block=settings.sequence_block,
        )
        return repaired > 0

    async def restore_stored_suspension(self) -> None:
        """A suspended run survives restarts and replicas: its run row and pending round come back from the
        store and the hosted deadlines are re-armed (expired ones fire at once)."""
        session = self._session
        record = session.record
        run_record = await session.store.get_run(record.tenant, record.session_id, record.active_run_id)
        if run_record is None:
            return
        calls = await session.store.list_tool_calls(record.tenant, record.session_id, run_record.run_id)
        last_round = max((c.round_index for c in calls), default=0)
        run = ActiveRun(
            run_id=run_record.run_id,
            record=run_record,
            model_ref=run_record.model_ref,
            credential=None,
            round=[c for c in calls if c.round_index == last_round],
        )
        session.restore_suspension(run)
