"""A group's buffered event writes join the write before them (store/group_commit.py, `merged_events`): a run's
events sent ahead of its next step cost one statement with that step, not one each. Only neighbours of one
session merge, never into or across an operation, rows keep their order, every write is settled as queued, and
a group that fails is retried write by write, unmerged, so only the failing write reports its error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from general_agent_server.store.group_commit import GroupCommitLoop, QueuedWrite, merged_events
from general_agent_server.store.port import StoreError, WriteBatch
from general_agent_server.store.sqlite.store import SqliteSessionStore
from general_agent_server.store.testing.factories import bump, make_event, make_session


def events(sid: str, *sequences: int, tenant: str = "t") -> WriteBatch:
    return WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, n) for n in sequences])


def step(sid: str, version: int, *sequences: int) -> WriteBatch:
    record = bump(make_session("t", sid, version=version))
    return WriteBatch(tenant="t", session_id=sid, session=record, events=[make_event(sid, n) for n in sequences])


def queued(*batches: WriteBatch, operation: str | None = None) -> list[QueuedWrite[str]]:
    return [QueuedWrite(batch, None, operation) for batch in batches]


def shape(group: list[QueuedWrite[str]]) -> list[tuple[str, bool, str | None, list[int]]]:
    return [
        (i.batch.session_id, i.batch.session is not None, i.operation, [e.sequence for e in i.batch.events])
        for i in group
    ]


def test_only_neighbouring_event_writes_of_one_session_join_the_write_before_them() -> None:
    first = step("a", 1, 1)
    group = queued(first, events("a", 2), events("a", 3, 4), events("b", 1), events("b", 2), step("a", 2, 5))
    group += queued(events("a", 6))
    group += queued(events("a", 7, tenant="other"))  # another tenant's session of that id
    merged = merged_events(group)
    assert shape(merged) == [
        ("a", True, None, [1, 2, 3, 4]),
        ("b", False, None, [1, 2]),
        ("a", True, None, [5, 6]),
        ("a", False, None, [7]),
    ]
    assert merged[-1].batch.tenant == "other"
    assert [e.sequence for e in first.events] == [1]  # the queued writes are left as they were
    assert [e.sequence for e in group[3].batch.events] == [1]


def test_events_before_a_step_join_it_too_but_two_steps_never_merge() -> None:
    group = queued(events("a", 1), events("a", 2), step("a", 1, 3), events("a", 4), step("a", 2, 5), step("a", 3))
    assert shape(merged_events(group)) == [
        ("a", True, None, [1, 2, 3, 4]),
        ("a", True, None, [5]),
        ("a", True, None, []),
    ]
    assert merged_events(group)[0].batch.session == group[2].batch.session


def test_nothing_joins_or_crosses_an_operation() -> None:
    freeing = events("a", 2)
    freeing.release_lease = "replica"  # holds more than events: takes the events before it, as a step does
    group = queued(events("a", 1)) + queued(events("a", 0), operation="delete") + queued(events("a", 1), freeing)
    assert shape(merged_events(group)) == [
        ("a", False, None, [1]),
        ("a", False, "delete", [0]),
        ("a", False, None, [1, 2]),
    ]
    assert merged_events(group)[-1].batch.release_lease == "replica"


class Recording(GroupCommitLoop[str]):
    """Applies nothing; records what each transaction was given and fails any that holds `poison`."""

    def __init__(self, poison: int) -> None:
        super().__init__(flush_interval=0.001, name="recording")
        self.transactions: list[list[tuple[str, bool, str | None, list[int]]]] = []
        self._poison = poison

    async def _transaction(self, items: list[QueuedWrite[str]]) -> None:
        self.transactions.append(shape(items))
        if any(e.sequence == self._poison for i in items for e in i.batch.events):
            raise StoreError("poisoned")


async def test_a_failing_merged_group_is_retried_unmerged_and_only_the_failing_write_fails() -> None:
    loop = Recording(poison=3)
    loop.start()
    try:
        await loop.submit(events("a", 1), durable=False)
        await loop.submit(events("a", 2), durable=False)
        await loop.submit(events("a", 3), durable=False)
        with pytest.raises(StoreError, match="poisoned"):
            await loop.submit(events("a", 3), durable=True)  # the poison again, durable: its caller is told
    finally:
        await loop.stop()
    assert loop.transactions[0] == [("a", False, None, [1, 2, 3, 3])]
    assert loop.transactions[1:] == [[("a", False, None, [n])] for n in (1, 2, 3, 3)]


async def test_a_turns_step_and_its_sent_ahead_events_reach_the_store_as_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteSessionStore(tmp_path / "state.sqlite3", flush_interval=0.001)
    await store.open()
    try:
        record = make_session("t", "s")
        await store.create_session(record)
        writer = store._writer
        given: list[list[tuple[str, bool, str | None, list[int]]]] = []
        transaction = writer._transaction

        async def recorded(items: list[QueuedWrite[Any]]) -> None:
            given.append(shape(items))
            await transaction(items)

        monkeypatch.setattr(writer, "_transaction", recorded)
        for sequence in (2, 3, 4):  # sent ahead: buffered until the step commits
            await store.write(WriteBatch(tenant="t", session_id="s", events=[make_event("s", sequence)]), durable=False)
        await store.write(WriteBatch(tenant="t", session_id="s", session=bump(record), events=[make_event("s", 1)]))
        assert given == [[("s", True, None, [2, 3, 4, 1])]]
        assert [e.sequence for e in await store.read_events("t", "s", after_sequence=0, limit=10)] == [1, 2, 3, 4]
        assert await store.get_session("t", "s") == bump(record)
    finally:
        await store.close()
