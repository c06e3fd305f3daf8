"""Events another replica's run of a session writes, delivered to this replica's subscribers of that session
(WatchSession, RunSession attachments, STEER followers), so a stream on any replica follows a run on any other.

While a session has subscribers here and no run of it executes here, its events are read from the log after the
last sequence delivered and offered to the subscribers exactly as stored (a replay from the log and the tail carry
the same events byte for byte). Subscribers drop what they have seen already (runs/streams.py), so an event
delivered both live here and by the tail reaches a stream once.

One task follows every such session of the process (`RemoteTails`): a followed session costs an entry, not a task,
and each poll asks the store for the newest sequence of all sessions due in one read
(`newest_event_sequences`), then reads the log only of those that moved. A session is due at once when the store
wakes its topic (store/wakeups.py: PostgreSQL's NOTIFY of another replica's commit), and otherwise every
`replica_poll_seconds` while another replica's run is active or events keep arriving, else every `IDLE_FACTOR`
times that; while its run executes here it is not read at all (the ledger publishes that run's events). The tail
never slows a run: it only reads."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from typing import Protocol

from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.store.port import SessionStore, StoreError
from general_agent_server.store.wakeups import Flag, WakeupSubscription, events_topic

logger = logging.getLogger(__name__)

IDLE_FACTOR = 10
BATCH = 500
# How early a due session is read: the loop's timer may fire a little before the instant asked for.
_EARLY = 0.001

Key = tuple[str, str]


class _Ledger(Protocol):
    @property
    def has_subscribers(self) -> bool: ...

    @property
    def last_published_sequence(self) -> int: ...

    def deliver(self, events: list[SequencedEvent]) -> None: ...


class _Run(Protocol):
    @property
    def task(self) -> asyncio.Task[None] | None: ...


class _Settings(Protocol):
    @property
    def replica_poll_seconds(self) -> float: ...


class FollowedSession(Protocol):
    """What the tails read of a loaded session (sessions/live.py): its own narrow view, since the sessions' shared
    dependencies hold the tails."""

    @property
    def tenant(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def live_point(self) -> int: ...

    @property
    def store(self) -> SessionStore: ...

    @property
    def ledger(self) -> _Ledger: ...

    @property
    def run(self) -> _Run | None: ...

    @property
    def owns_run(self) -> bool: ...

    @property
    def record(self) -> SessionRecord: ...

    @property
    def settings(self) -> _Settings: ...


class _Followed:
    """One followed session: where its tail is, when it is next read, and its wake-up subscription."""

    __slots__ = ("cursor", "due", "flag", "key", "ref", "running", "wakeup")

    def __init__(self, session: FollowedSession, key: Key, tails: RemoteTails) -> None:
        # Weak: the session owns its subscribers, and an evicted session must be freed without the cycle collector.
        self.ref = weakref.ref(session)
        self.key = key
        self.cursor = session.live_point
        self.due = 0.0
        # The task of a run executing here meanwhile: not read until it ends.
        self.running: asyncio.Task[None] | None = None
        self.wakeup: WakeupSubscription = session.store.subscribe(events_topic(*key), self._woken)
        self.flag = tails.flag

    def _woken(self) -> None:
        # A run executing here wakes its topic at each of its own commits: nothing to read for those.
        if self.running is None:
            self.flag.wake()


class RemoteTails:
    """The tails of every followed session of one store, run by one task.

    Invariants: the entries, their cursors and due times are touched only on the event loop, by `follow` and by
    the task; an entry lives while its session is alive and has subscribers, and its wake-up subscription is
    closed when it is dropped; at most one task runs, and it ends when no session is followed."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._followed: dict[Key, _Followed] = {}
        self.flag = Flag()
        self._task: asyncio.Task[None] | None = None

    def follow(self, session: FollowedSession) -> None:
        """A subscriber that follows other replicas arrived: the session is followed until its last one leaves."""
        key = (session.tenant, session.session_id)
        entry = self._followed.get(key)
        if entry is None or entry.ref() is not session:
            if entry is not None:
                entry.wakeup.close()  # an evicted copy's entry: the session was loaded again
            self._followed[key] = _Followed(session, key, self)
            self.flag.wake()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="remote-tails")

    @property
    def followed(self) -> int:
        return len(self._followed)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for entry in self._followed.values():
            entry.wakeup.close()
        self._followed.clear()

    async def _run(self) -> None:
        while self._followed:
            try:
                await self._step()
            except StoreError:
                return  # the store is closing; the next subscriber starts the task again
            except Exception:
                logger.exception("could not read the event log", extra={"category": "system"})
                self._postpone_all()
            if self._followed:
                await self.flag.wait(max(0.0, min(e.due for e in self._followed.values()) - time.monotonic()))

    async def _step(self) -> None:
        due = self._due_entries()
        if not due:
            return
        newest = await self._store.newest_event_sequences([entry.key for entry in due])
        for entry in due:
            await self._read(entry, newest.get(entry.key, 0))

    def _due_entries(self) -> list[_Followed]:
        """Drops entries no longer followed and answers those to read now."""
        now = time.monotonic()
        due: list[_Followed] = []
        for key, entry in list(self._followed.items()):
            session = entry.ref()
            if session is None or not session.ledger.has_subscribers:
                entry.wakeup.close()
                del self._followed[key]
                continue
            # What this replica published itself reached the subscribers already.
            entry.cursor = max(entry.cursor, session.ledger.last_published_sequence)
            if self._running_here(entry, session):
                continue
            if entry.wakeup.woken or entry.due <= now + _EARLY:
                due.append(entry)
        return due

    def _running_here(self, entry: _Followed, session: FollowedSession) -> bool:
        """Whether the session's run executes here; its end makes the entry due one poll later. While the run held
        the lease nobody else wrote the session, so every wake-up meanwhile was its own."""
        run = session.run
        task = run.task if run is not None and session.owns_run else None
        if task is None or task.done():
            if entry.running is not None:
                entry.running = None
                entry.wakeup.clear()
                entry.due = time.monotonic() + session.settings.replica_poll_seconds
            return False
        entry.wakeup.clear()
        if entry.running is not task:
            entry.running = task
            entry.due = math.inf
            task.add_done_callback(lambda _: self.flag.wake())
        return True

    async def _read(self, entry: _Followed, newest: int) -> None:
        entry.wakeup.clear()
        session = entry.ref()
        if session is None:
            return
        events = []
        if newest > entry.cursor:
            events = await self._store.read_events(
                session.tenant, session.session_id, after_sequence=entry.cursor, limit=BATCH
            )
        if events:
            entry.cursor = events[-1].sequence
            session.ledger.deliver(events)  # leaves out what a run started here meanwhile numbered
        busy = bool(events) or session.record.state is SessionState.RUNNING
        poll = session.settings.replica_poll_seconds
        entry.due = _next_tick(poll if busy else poll * IDLE_FACTOR)

    def _postpone_all(self) -> None:
        for entry in self._followed.values():
            session = entry.ref()
            if session is not None and entry.running is None:
                entry.due = _next_tick(session.settings.replica_poll_seconds * IDLE_FACTOR)


def _next_tick(interval: float) -> float:
    """The next multiple of `interval` on the monotonic clock: sessions polled at the same interval are due at the
    same instants, so one read serves them all however their follows were spread."""
    now = time.monotonic()
    return (now // interval + 1) * interval if interval > 0 else now
