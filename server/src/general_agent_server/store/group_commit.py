"""The group-commit loop both durable stores write through: one queue and one asyncio task, so writes commit in
the order they were made (the BatchWriter contract), grouped into one transaction. Buffered writes
(durable=False) wait up to `flush_interval` for company unless a durable write arrives, so a 1,000-delta turn
costs a handful of commits, not a thousand. A group that fails is retried write by write, so only the failing
write reports its error; the loop itself never dies (a locked or failing database fails the writes of that
moment, and later writes proceed). Each store's writer subclasses GroupCommitLoop and supplies only its
transaction: `_transaction(items)` applies the items in one transaction, or raises and leaves nothing of them
applied."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from general_agent_server.domain.events import SequencedEvent
from general_agent_server.observability.port import Observer
from general_agent_server.store.port import StoreError, WriteBatch
from general_agent_server.store.uncancellable import LandingFuture, run_to_end
from general_agent_server.store.wakeups import Flag

logger = logging.getLogger(__name__)

Op = TypeVar("Op")


@dataclass
class QueuedWrite(Generic[Op]):
    batch: WriteBatch
    done: asyncio.Future[None] | None
    # Session creation, deletion and leases ride the same queue as batches so they are ordered with
    # them; the operation runs first in the batch's transaction.
    operation: Op | None = None


class GroupCommitLoop(ABC, Generic[Op]):
    """Owns the queue and the task (see module docstring). `start`, then `submit` any number of times;
    `stop` commits everything queued and ends the task."""

    def __init__(self, *, flush_interval: float, name: str) -> None:
        self._flush_interval = flush_interval
        self._name = name
        self._queue: asyncio.Queue[QueuedWrite[Op] | None] = asyncio.Queue()
        # Woken by a write that must commit now (and at stop): a buffered group waits for it, or its interval.
        self._urgent = Flag()
        self._task: asyncio.Task[None] | None = None
        # The loop's task waits for a first write with nothing queued or held: a durable write may then commit
        # from its caller's task (`submit`). `_committing` keeps such a commit and the loop's groups apart.
        self._parked = False
        self._committing = asyncio.Lock()
        # Told each group commit's latency and size (observability/port.py); None: nobody asks.
        self.observer: Observer | None = None

    @abstractmethod
    async def _transaction(self, items: list[QueuedWrite[Op]]) -> None:
        """Applies `items` in one transaction, or raises with nothing of them applied."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self._name)

    async def stop(self) -> None:
        """Commits everything queued, then ends the loop."""
        if self._task is None:
            return
        await self._queue.put(None)
        self._urgent.wake()
        await self._task
        self._task = None

    async def submit(self, batch: WriteBatch, *, durable: bool = True, operation: Op | None = None) -> None:
        """Queues a write; a durable one (every operation is) returns once committed or raises StoreError."""
        if self._task is None or self._task.done():
            raise StoreError("store is not open")
        if not durable and operation is None:
            self._queue.put_nowait(QueuedWrite(batch, None))
            return
        # A write once queued commits whatever happens to its caller: a cancelled caller learns of it after.
        done = LandingFuture[None](loop=asyncio.get_running_loop())
        item = QueuedWrite(batch, done, operation)
        if self._parked and self._queue.empty() and not self._committing.locked():
            # Nothing queued, held or committing: commit it from here, without the hand-off to the loop's task.
            await run_to_end(self._commit_alone(item))
        else:
            self._queue.put_nowait(item)
            self._urgent.wake()
        await done

    async def _commit_alone(self, item: QueuedWrite[Op]) -> None:
        async with self._committing:
            await self._commit([item])

    async def _loop(self) -> None:
        group: list[QueuedWrite[Op]] = []
        try:
            await self._serve(group)
        finally:
            # Ended early (the task cancelled at shutdown): no caller may wait forever for a write that will not land.
            _abandon([*group, *self._drain()])

    async def _serve(self, group: list[QueuedWrite[Op]]) -> None:
        """The loop's body; `group` holds the writes being committed, for `_loop` to settle if the task ends."""
        stopping = False
        while not stopping:
            group.clear()
            self._parked = True
            try:
                first = await self._queue.get()
            finally:
                self._parked = False
            if first is None:
                break
            group.append(first)
            if first.done is None:
                # Only buffered writes so far: give more a moment to arrive, unless one must commit now.
                await self._urgent.wait(self._flush_interval)
            self._urgent.clear()
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                group.append(item)
            async with self._committing:
                await self._commit(group)
        # Drain anything left so no caller waits forever.
        group.clear()
        group.extend(self._drain())
        if group:
            async with self._committing:
                await self._commit(group)
        group.clear()

    def _drain(self) -> list[QueuedWrite[Op]]:
        rest: list[QueuedWrite[Op]] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                rest.append(item)
        return rest

    async def _commit(self, group: list[QueuedWrite[Op]]) -> None:
        started = time.perf_counter()
        errors = await self._isolated(group)
        if self.observer is not None:
            self.observer.store_commit(time.perf_counter() - started, len(group))
        for item, error in zip(group, errors, strict=True):
            _settle(item, None if error is None else self._store_error(error))

    def _store_error(self, error: BaseException) -> StoreError:
        """The port's error for what the driver raised; a store whose driver tells conditions that clear
        (a full disk, a lock) apart maps them here."""
        return error if isinstance(error, StoreError) else StoreError(str(error))

    async def _isolated(self, group: list[QueuedWrite[Op]]) -> list[BaseException | None]:
        """Commits the group in one transaction; on failure retries each write alone so that only the
        failing one reports the error."""
        try:
            await self._transaction(merged_events(group))
        except Exception as exc:
            if len(group) == 1:
                return [exc]
            errors: list[BaseException | None] = []
            for item in group:
                try:
                    await self._transaction([item])
                except Exception as single:
                    errors.append(single)
                else:
                    errors.append(None)
            return errors
        return [None] * len(group)


def _abandon(items: list[QueuedWrite[Op]]) -> None:
    for item in items:
        if item.done is not None and not item.done.done():
            item.done.set_exception(StoreError("the store closed before this write was known to have committed"))


def _settle(item: QueuedWrite[Op], error: StoreError | None) -> None:
    if item.done is None:
        if error is not None:
            logger.error("buffered write failed: %s", error, extra={"category": "system"})
        return
    if item.done.done():
        return
    if error is None:
        item.done.set_result(None)
    else:
        item.done.set_exception(error)


def merged_events(group: list[QueuedWrite[Op]]) -> list[QueuedWrite[Op]]:
    """The group as one transaction applies it: writes that hold only events (what a run sends ahead of its next
    step, buffered) join their neighbours of the same session, the step among them when there is one, so a
    turn's events cost one statement, not one per write. Only neighbours without an operation merge, and at
    most one write that holds more than events, so every row is applied in the order it was written. The writes
    themselves are settled as they were queued, and a group that fails is retried write by write, unmerged
    (`_isolated`)."""
    merged: list[QueuedWrite[Op]] = []
    joined: list[SequencedEvent] | None = None  # the events of merged[-1] when it is a merge made here
    only_events = False  # merged[-1] holds nothing but events
    for item in group:
        batch, last = item.batch, merged[-1] if merged else None
        this_only_events = item.operation is None and _events_only(batch)
        if (
            last is not None
            and (this_only_events or (only_events and item.operation is None))
            and last.operation is None
            and last.batch.session_id == batch.session_id
            and last.batch.tenant == batch.tenant
        ):
            if joined is not None and this_only_events:
                joined.extend(batch.events)  # the merged write holds this list
            else:
                joined = [*last.batch.events, *batch.events] if joined is None else [*joined, *batch.events]
                merged[-1] = QueuedWrite(replace(last.batch if this_only_events else batch, events=joined), None)
            only_events = only_events and this_only_events
            continue
        merged.append(item)
        joined, only_events = None, this_only_events
    return merged


def _events_only(batch: WriteBatch) -> bool:
    return (
        batch.session is None
        and not (batch.transcript or batch.history or batch.runs or batch.tool_calls or batch.hook_registrations)
        and not (batch.replace_history or batch.clear_transcript or batch.release_lease or batch.take_lease)
        and batch.idempotency is None
    )
