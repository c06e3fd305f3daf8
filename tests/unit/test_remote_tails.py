"""One task follows every session with subscribers here (sessions/remote_tail.py): another replica's events reach
each session's subscribers; a poll asks the store for the newest sequence of all due sessions in one read and
reads the log only of those that moved; a run executing here is not read; a wake-up of the store reads at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.sessions.remote_tail import RemoteTails
from general_agent_server.store.memory import InMemorySessionStore
from general_agent_server.store.port import WriteBatch
from general_agent_server.store.testing.factories import make_event, make_session
from tests.support.hook_host import wait_until


class CountingStore(InMemorySessionStore):
    """The in-memory store, counting the tail's reads."""

    def __init__(self) -> None:
        super().__init__()
        self.newest_reads: list[int] = []
        self.log_reads: list[str] = []

    async def newest_event_sequences(self, sessions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        self.newest_reads.append(len(sessions))
        return await super().newest_event_sequences(sessions)

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]:
        self.log_reads.append(session_id)
        return await super().read_events(tenant, session_id, after_sequence=after_sequence, limit=limit)


async def opened() -> CountingStore:
    store = CountingStore()
    await store.open()
    return store


@dataclass
class Ledger:
    delivered: list[int] = field(default_factory=list)
    has_subscribers: bool = True
    last_published_sequence: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def deliver(self, events: list[SequencedEvent]) -> None:
        self.delivered.extend(e.sequence for e in events)
        self.arrived.set()


@dataclass
class Settings:
    replica_poll_seconds: float


@dataclass
class Run:
    task: asyncio.Task[None]


@dataclass
class Session:
    """What the tails read of a loaded session."""

    store: CountingStore
    record: SessionRecord
    settings: Settings
    ledger: Ledger = field(default_factory=Ledger)
    run: Run | None = None
    owns_run: bool = False
    live_point: int = 0

    @property
    def tenant(self) -> str:
        return self.record.tenant

    @property
    def session_id(self) -> str:
        return self.record.session_id


async def loaded(store: CountingStore, sid: str, poll: float) -> Session:
    record = make_session("t", sid)
    await store.create_session(record)
    return Session(store=store, record=record, settings=Settings(poll))


async def another_replica_writes(store: CountingStore, sid: str, *sequences: int) -> None:
    await store.write(WriteBatch(tenant="t", session_id=sid, events=[make_event(sid, n) for n in sequences]))
    await store.notify("t", sid, sequences[-1])


def follow(tails: RemoteTails, session: Session) -> None:
    tails.follow(session)


def tail_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("remote-tail")]


async def test_one_task_follows_many_sessions_and_reads_only_the_logs_that_moved() -> None:
    store = await opened()
    tails = RemoteTails(store)
    sessions = [await loaded(store, f"s{i}", poll=0.01) for i in range(50)]
    for session in sessions:
        follow(tails, session)
    assert len(tail_tasks()) == 1
    await wait_until(lambda: len(store.newest_reads) >= 3)
    assert store.log_reads == []  # nothing moved: one read per poll for all fifty
    assert max(store.newest_reads) == 50

    await another_replica_writes(store, "s7", 1, 2)
    await another_replica_writes(store, "s30", 5)
    await wait_until(lambda: sessions[7].ledger.delivered == [1, 2] and sessions[30].ledger.delivered == [5])
    assert sorted(set(store.log_reads)) == ["s30", "s7"]
    assert all(not s.ledger.delivered for i, s in enumerate(sessions) if i not in (7, 30))
    await tails.close()


async def test_a_session_without_subscribers_is_dropped_and_the_task_ends_with_the_last() -> None:
    store = await opened()
    tails = RemoteTails(store)
    first, second = await loaded(store, "a", poll=0.01), await loaded(store, "b", poll=0.01)
    follow(tails, first)
    follow(tails, second)
    first.ledger.has_subscribers = False
    await wait_until(lambda: tails.followed == 1)
    second.ledger.has_subscribers = False
    await wait_until(lambda: not tail_tasks())
    assert tails.followed == 0
    # A new subscriber starts it again, from the session's live point.
    second.ledger.has_subscribers = True
    second.live_point = 3
    await another_replica_writes(store, "b", 3, 4)
    follow(tails, second)
    await wait_until(lambda: second.ledger.delivered == [4])
    await tails.close()


async def test_a_wake_up_reads_at_once() -> None:
    store = await opened()
    tails = RemoteTails(store)
    session = await loaded(store, "s", poll=3600.0)  # only wake-ups bring reads after the first
    follow(tails, session)
    await wait_until(lambda: len(store.newest_reads) == 1)
    await another_replica_writes(store, "s", 1)
    await asyncio.wait_for(session.ledger.arrived.wait(), 30)
    assert session.ledger.delivered == [1]
    assert len(store.newest_reads) == 2
    await tails.close()


async def test_a_run_executing_here_is_not_read() -> None:
    store = await opened()
    tails = RemoteTails(store)
    session = await loaded(store, "s", poll=0.01)
    follow(tails, session)
    await another_replica_writes(store, "s", 1)
    await wait_until(lambda: session.ledger.delivered == [1])

    ends = asyncio.Event()
    run = asyncio.create_task(ends.wait(), name="run")
    session.run, session.owns_run = Run(cast("asyncio.Task[None]", run)), True
    session.record = replace(session.record, state=SessionState.RUNNING)
    reads = len(store.newest_reads)
    # The run's own commit wakes the topic; its event reaches the stream from the ledger, never from the log.
    await store.write(WriteBatch(tenant="t", session_id="s", events=[make_event("s", 2)]))
    await store.notify("t", "s", 2)
    await asyncio.sleep(0.2)  # twenty polls' time: none of them may read the session
    assert session.ledger.delivered == [1]
    assert len(store.newest_reads) <= reads + 1  # at most one read began before the run was seen
    session.ledger.last_published_sequence = 2
    ends.set()
    await wait_until(lambda: len(store.newest_reads) > reads + 2)
    assert session.ledger.delivered == [1]
    assert store.log_reads == ["s"]
    await tails.close()
