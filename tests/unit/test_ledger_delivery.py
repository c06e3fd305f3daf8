"""The ledger's two ways to its subscribers: what it publishes itself, and what the remote tail reads from the
log (sessions/remote_tail.py). A log read can see this copy's own commit before that commit's publish, so the
tail's delivery leaves out what this copy numbered: a stream never gets an event twice."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from general_agent_server.domain.events import AssistantDelta
from general_agent_server.sessions.ledger import SessionLedger
from general_agent_server.store.testing.factories import make_event, make_session
from tests.support.ledgers import make_ledger


def ledger(tmp_path: Path, last_sequence: int) -> SessionLedger:
    return make_ledger(tmp_path, replace(make_session("t", "s"), last_sequence=last_sequence))


def drain(subscriber: object) -> list[int]:
    items = getattr(subscriber, "_items")  # noqa: B009 (the buffer, read without awaiting)
    return [e.sequence for e in items]


def test_the_tail_leaves_out_what_this_copy_numbered_and_delivers_the_rest(tmp_path: Path) -> None:
    book = ledger(tmp_path, last_sequence=10)
    subscriber = book.subscribe()
    own = [book.stamp("r", AssistantDelta(text=str(i))) for i in range(3)]
    assert [e.sequence for e in own] == [11, 12, 13]
    # The tail read the log after 10 and found this copy's commit (not yet published) and nothing else.
    book.deliver([make_event("s", 11), make_event("s", 12)])
    assert drain(subscriber) == []
    book.publish(own)
    assert drain(subscriber) == [11, 12, 13]
    # What another replica numbered after this copy's range reaches the stream.
    book.deliver([make_event("s", 13), make_event("s", 14), make_event("s", 15)])
    assert drain(subscriber) == [11, 12, 13, 14, 15]


async def test_a_sent_delta_reaches_a_waiting_subscriber_before_the_run_reads_on_and_later_ones_merge(
    tmp_path: Path,
) -> None:
    """The model's events often arrive many to one read; the run hands the first delta of a block to its
    subscribers before it reads the next, so a host sees text as soon as the model sends it."""
    book = ledger(tmp_path, last_sequence=0)
    await book._store.open()  # the ledger's own store, opened as the server's is
    book.record = replace(book.record, sequence_reserved=1000)  # no reservation commit on the way
    subscriber = book.subscribe()
    received: list[str] = []

    async def watch() -> None:
        while (event := await subscriber.get()) is not None:
            assert isinstance(event.body, AssistantDelta)
            received.append(event.body.text)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    await book.emit_delta("r", AssistantDelta(text="a"), first=True)
    assert received == ["a"]
    for text in "bcd":
        await book.emit_delta("r", AssistantDelta(text=text))
    assert received == ["a"]  # read while the first was in flight: merged, sent at the loop's next turn
    await book.flush_deltas()
    await asyncio.sleep(0)
    assert received == ["a", "bcd"]
    book.close_subscribers()
    await watcher
