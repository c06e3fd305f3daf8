"""Events another replica's run of a session writes, delivered to this replica's subscribers of that session
(WatchSession, RunSession attachments, STEER followers), so a stream on any replica follows a run on any other.

While the session has subscribers here and no run of it executes here, a tail reads the session's event log after
the last sequence it delivered and offers what it finds to the subscribers, exactly as stored (a replay from the
log and the tail carry the same events byte for byte). Subscribers drop what they have seen already
(runs/streams.py), so an event delivered both live here and by the tail reaches a stream once. It reads again as
soon as the store wakes it (store/wakeups.py: PostgreSQL's NOTIFY of another replica's commit), and otherwise
every `replica_poll_seconds` while another replica's run is active or events keep arriving, else every
`IDLE_FACTOR` times that; it never slows a run (it only reads)."""

from __future__ import annotations

import asyncio
import logging
import weakref

from general_agent_server.domain.session import SessionState
from general_agent_server.sessions.loaded import LoadedSession
from general_agent_server.store.port import StoreError
from general_agent_server.store.wakeups import WakeupSubscription, events_topic

logger = logging.getLogger(__name__)

IDLE_FACTOR = 10
BATCH = 500


class RemoteTail:
    def __init__(self, session: LoadedSession) -> None:
        # Weak: the session owns this object, and an evicted session must be freed without the cycle collector.
        self._ref = weakref.ref(session)
        self._task: asyncio.Task[None] | None = None

    def ensure(self) -> None:
        """A subscriber arrived: the tail runs until the last one leaves."""
        if self._task is None or self._task.done():
            session = self._ref()
            if session is not None:
                self._task = asyncio.create_task(self._follow(), name=f"remote-tail-{session.session_id}")

    async def _follow(self) -> None:
        session = self._ref()
        if session is None:
            return
        cursor = session.live_point
        wakeup = session.store.subscribe(events_topic(session.tenant, session.session_id))
        del session
        try:
            await self._tail(cursor, wakeup)
        finally:
            wakeup.close()

    async def _tail(self, cursor: int, wakeup: WakeupSubscription) -> None:
        while True:
            session = self._ref()
            if session is None or not session.ledger.has_subscribers:
                return
            # What this replica published itself reached the subscribers already.
            cursor = max(cursor, session.ledger.last_published_sequence)
            running_here = session.run.task if session.owns_run and session.run is not None else None
            if running_here is not None:
                # This replica's own events reach the subscribers from the ledger: nothing to read until the
                # run's task ends here (its commits would wake every step of the loop below for nothing). While
                # the run held the lease nobody else wrote the session, so every wake-up meanwhile was its own.
                poll = session.settings.replica_poll_seconds
                del session
                await asyncio.wait((running_here,))
                wakeup.clear()
                await wakeup.wait(poll)
                continue
            try:
                events = await session.store.read_events(
                    session.tenant, session.session_id, after_sequence=cursor, limit=BATCH
                )
            except StoreError:
                return  # the store is closing
            except Exception:
                logger.exception("could not read the event log", extra={"category": "system"})
                events = []
            if events:
                cursor = events[-1].sequence
                session.ledger.deliver(events)  # leaves out what a run started here meanwhile numbered
            busy = bool(events) or session.record.state is SessionState.RUNNING
            poll = session.settings.replica_poll_seconds
            del session
            await wakeup.wait(poll if busy else poll * IDLE_FACTOR)
