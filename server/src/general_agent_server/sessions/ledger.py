"""The ledger of one loaded session: its durable state in memory (the session record and the model history),
the event sequencer, the serialised commit, publication to subscribers, and delta coalescing.

Guarantees (docs/architecture.md, "The run's invariants"):
- Memory follows the store: `record` and `history` change only after the batch that changes them has
  committed, so the two never disagree, even when the caller is cancelled meanwhile (the cancellation is
  delivered once the commit has landed).
- Commits are serialised in the order they are asked for; each is built from the state the previous one left,
  so two never race on the session version or lose each other's changes. A change that depends on the current
  state comes from `derive`, called in commit order; it may raise CommitRefused, and then nothing is written.
- Transcript entries pass the write-path hooks inside the commit, in commit order.
- Sequences strictly increase and are never reused: they are reserved in blocks in the session record, and a
  session left RUNNING by a crash continues after its whole reserved block.
- Events that announce a committed state change are published after their commit; deltas are sent at once and
  committed with the next group. What is numbered is what every subscriber and the log receive: nothing merges
  after numbering, so a live stream and a replay carry the same events byte for byte.
- The first delta of a content block goes out at once (the run yields to its subscribers after publishing it);
  later deltas that arrive while the previous send is in flight (before the event loop comes round again) merge
  into one event, sent at the next turn of the loop or before any other event."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import (
    COALESCIBLE_KINDS,
    AssistantDelta,
    EventBody,
    ReasoningDelta,
    SequencedEvent,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import IdempotencyRecord, RunRecord, ToolCallRecord
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.domain.transcript import TranscriptBody, TranscriptEntry
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.security.redaction import redact
from general_agent_server.sessions import session_log
from general_agent_server.sessions.subscribers import Subscriber
from general_agent_server.store.port import SessionStore, VersionConflictError, WriteBatch
from general_agent_server.store.uncancellable import run_to_end

logger = logging.getLogger(__name__)

TranscriptFilter = Callable[[list[TranscriptEntry]], Awaitable[list[TranscriptEntry]]]
Derive = Callable[[SessionRecord], dict[str, object]]
_DeltaKind = type[AssistantDelta] | type[ReasoningDelta]


class CommitRefused(Exception):
    """Raised by a commit's `derive` when the state it finds rules the step out; nothing is written."""


def changed_elsewhere(session_id: str) -> ServiceError:
    """A commit found another version in the store: another replica changed the session meanwhile."""
    return ServiceError(
        ErrorCode.FAILED_PRECONDITION,
        "SESSION_BUSY",
        f"session {session_id!r} was changed by another server replica meanwhile; retry",
        metadata={"session_id": session_id},
        retry_after_seconds=0.1,
    )


def _no_guard() -> None:
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class LedgerSettings:
    sequence_block: int
    subscriber_buffer: int
    # This replica's lease owner id: a commit that ends or suspends the run frees the lease with it, and an
    # admission commit may take it (`commit(take_lease=True)`) for `lease_ttl_seconds`.
    replica_id: str
    lease_ttl_seconds: float
    event_retention_count: int
    event_retention_seconds: float


async def _no_filter(entries: list[TranscriptEntry]) -> list[TranscriptEntry]:
    return entries


def _first_sequence(record: SessionRecord) -> int:
    """A session left RUNNING by a crash may have sent events that never committed: skip past every reserved
    sequence. Otherwise everything sent was committed and numbering simply continues."""
    if record.state is SessionState.RUNNING:
        return record.sequence_reserved + 1
    return max(record.last_sequence, 0) + 1


class SessionLedger:
    """See the module docstring for what it guarantees."""

    def __init__(
        self,
        *,
        record: SessionRecord,
        history: list[HistoryMessage],
        store: SessionStore,
        exporter: TranscriptExporter,
        event_log: EventLog | None,
        settings: LedgerSettings,
    ) -> None:
        self.record = record
        self.history = history
        # Fixed for the ledger's life (every record it holds is this session's); read dozens of times per turn.
        self.tenant = record.tenant
        self.session_id = record.session_id
        self._store = store
        self._exporter = exporter
        self._event_log = event_log
        self._settings = settings
        # Write-path hooks, set by the live session (they need the session's hook scope).
        self.transcript_filter: TranscriptFilter = _no_filter
        # Raises when this copy may not write (the live session: another replica drives its run).
        self.guard: Callable[[], None] = _no_guard
        # Set when a commit met another version: the copy is stale and must be read again before use.
        self.stale = False
        # Set when a committed batch freed this replica's lease (a run's end or suspension): the lease needs no
        # release of its own (sessions/replica_sync.py).
        self.lease_released = False
        self._commit_lock = asyncio.Lock()
        self._commits_waiting = 0
        self._subscribers: list[Subscriber] = []
        self._background: set[asyncio.Task[None]] = set()
        # The merged delta waiting to be sent, and whether a send happened in this turn of the event loop.
        self._pending_delta: tuple[str, _DeltaKind, list[str]] | None = None
        self._delta_window_open = False
        self._purged_at_sequence = 0
        self._purged_at_time = time.monotonic()
        self._next_sequence = self._numbered_from = _first_sequence(record)
        # The newest event this copy published itself (another replica's come from the log: remote_tail.py).
        self.last_published_sequence = 0

    def reload(self, record: SessionRecord, history: list[HistoryMessage]) -> None:
        """Takes the stored state read again (another replica changed the session); no commit is in flight."""
        self.record = record
        self.history = history
        self._next_sequence = self._numbered_from = _first_sequence(record)
        self.stale = False

    @property
    def last_assigned_sequence(self) -> int:
        return self._next_sequence - 1

    @property
    def commits_waiting(self) -> bool:
        """Whether some commit waits behind the one in flight."""
        return self._commits_waiting > 0

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

    # ------------------------------------------------------------------ subscribers
    def subscribe(self) -> Subscriber:
        subscriber = Subscriber(max_buffered=self._settings.subscriber_buffer)
        self._subscribers.append(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def close_subscribers(self, error: ServiceError | None = None) -> None:
        for subscriber in list(self._subscribers):
            if error is None:
                subscriber.close()
            else:
                subscriber.fail(error)

    def publish(self, events: list[SequencedEvent]) -> None:
        if self._event_log is not None:
            self._event_log.events(self.tenant, self.session_id, events)
        if events:
            self.last_published_sequence = max(self.last_published_sequence, events[-1].sequence)
        self._offer(events)

    def deliver(self, events: list[SequencedEvent]) -> None:
        """Offers events to the subscribers only (another replica's, read from the log: it logged them). An event
        this copy numbered is left out: a read of the log can see this copy's commit before the commit's own
        publish, which reaches the subscribers anyway."""
        own_from, own_to = self._numbered_from, self._next_sequence
        self._offer([e for e in events if not own_from <= e.sequence < own_to])

    def _offer(self, events: list[SequencedEvent]) -> None:
        for subscriber in self._subscribers:
            for event in events:
                subscriber.offer(event)

    # ------------------------------------------------------------------ sequencing
    def stamp(self, run_id: str, body: EventBody) -> SequencedEvent:
        sequence = self._next_sequence
        self._next_sequence += 1
        # Every event is stamped before it is stored, published or logged: one redaction covers them all.
        return SequencedEvent(
            sequence=sequence, session_id=self.session_id, run_id=run_id, create_time=utcnow(), body=redact(body)
        )

    def entry(self, run_id: str, body: TranscriptBody, sequence: int = 0) -> TranscriptEntry:
        return TranscriptEntry(timestamp=utcnow(), body=body, sequence=sequence, run_id=run_id)

    # ------------------------------------------------------------------ deltas
    async def emit_delta(self, run_id: str, body: AssistantDelta | ReasoningDelta, *, first: bool = False) -> None:
        """A text or reasoning delta, coalesced as the module docstring says."""
        pending = self._pending_delta
        if pending is not None:
            if not first and pending[0] == run_id and pending[1] is type(body):
                pending[2].append(body.text)
                return
            await self.flush_deltas()
        if self._delta_window_open and not first:
            self._pending_delta = (run_id, type(body), [body.text])
            return
        await self._send_delta(run_id, body)

    async def flush_deltas(self) -> None:
        """Sends the merged pending delta, if any (called before any other event of the run)."""
        pending, self._pending_delta = self._pending_delta, None
        if pending is not None:
            run_id, kind, texts = pending
            await self._send_delta(run_id, kind(text="".join(texts)))

    async def _send_delta(self, run_id: str, body: EventBody) -> None:
        self._delta_window_open = True
        try:
            await self.emit_buffered(run_id, body)
            if self._subscribers:
                # The model's events often arrive many to one read: without this yield the subscribers would
                # send this delta only once the run has read them all and reached its next wait.
                await asyncio.sleep(0)
        finally:
            # Scheduled after the yield, so the deltas read meanwhile merge rather than go out one by one.
            asyncio.get_running_loop().call_soon(self._close_delta_window)

    def _close_delta_window(self) -> None:
        self._delta_window_open = False
        if self._pending_delta is not None:
            self.spawn(self.flush_deltas(), f"flush-deltas-{self.session_id}")

    async def emit_buffered(self, run_id: str, body: EventBody) -> None:
        """An event that announces no state change (a delta): sent at once, committed with the next group."""
        if self._pending_delta is not None and body.kind not in COALESCIBLE_KINDS:
            await self.flush_deltas()
        if self._next_sequence > self.record.sequence_reserved:
            await self.commit()  # reserves the next block before the sequence is used
        event = self.stamp(run_id, body)
        await self._store.write(
            WriteBatch(tenant=self.tenant, session_id=self.session_id, events=[event]), durable=False
        )
        self.publish([event])

    async def send_ahead(self, events: list[SequencedEvent]) -> bool:
        """Stamped events that announce no committed change (a call's usage_snapshot and turn_complete), sent now
        and stored with the next group, as deltas are, so the streams send them while the commit they precede
        runs. False (nothing done) when they are numbered past the reserved block: they then go with the commit."""
        if not events or events[-1].sequence > self.record.sequence_reserved:
            return False
        await self.flush_deltas()
        batch = WriteBatch(tenant=self.tenant, session_id=self.session_id, events=events)
        await self._store.write(batch, durable=False)
        self.publish(events)
        return True

    # ------------------------------------------------------------------ commits
    async def commit(
        self,
        *,
        events: list[SequencedEvent] | None = None,
        transcript: list[TranscriptEntry] | None = None,
        history: list[HistoryMessage] | None = None,
        replace_history: bool = False,
        runs: list[RunRecord] | None = None,
        tool_calls: list[ToolCallRecord] | None = None,
        derive: Derive | None = None,
        transcript_filtered: bool = False,
        idempotency: IdempotencyRecord | None = None,
        take_lease: bool = False,
        publish: bool = True,
        **changes: object,
    ) -> None:
        """Commits one step atomically (compare-and-set on the session version), then publishes its events
        (`publish=False`: the caller publishes them, before it next yields to the loop).
        `transcript_filtered`: the caller has passed the entries through the write-path hooks already (to keep
        the hook order of a tool round). `take_lease`: the step takes this replica's lease in its transaction, and
        fails as a changed session does (SESSION_BUSY, the copy marked stale) while another replica holds it."""

        self.guard()

        async def serialised() -> None:
            self._commits_waiting += 1
            try:
                await self._commit_lock.acquire()
            finally:
                self._commits_waiting -= 1
            try:
                entries = transcript or []
                if not transcript_filtered:
                    entries = await self.transcript_filter(entries)
                await self._commit_now(
                    events=events or [],
                    transcript=entries,
                    history=history or [],
                    replace_history=replace_history,
                    runs=runs or [],
                    tool_calls=tool_calls or [],
                    changes={**changes, **derive(self.record)} if derive is not None else changes,
                    idempotency=idempotency,
                    take_lease=take_lease,
                    publish=publish,
                )
            finally:
                self._commit_lock.release()

        # Run to its end in this task (store/uncancellable.py): a cancellation meanwhile is raised once it has landed.
        await run_to_end(serialised())

    async def _commit_now(
        self,
        *,
        events: list[SequencedEvent],
        transcript: list[TranscriptEntry],
        history: list[HistoryMessage],
        replace_history: bool,
        runs: list[RunRecord],
        tool_calls: list[ToolCallRecord],
        changes: dict[str, object],
        idempotency: IdempotencyRecord | None,
        take_lease: bool,
        publish: bool,
    ) -> None:
        # Nothing is stored or exported with a secret the server knows in it (model text and host input included).
        transcript, history, runs, tool_calls = redact((transcript, history, runs, tool_calls))
        new_history = history if replace_history else [*self.history, *history]
        reserved = self.record.sequence_reserved
        if self._next_sequence + 64 > reserved:
            reserved = self._next_sequence + self._settings.sequence_block
        record = replace(
            self.record,
            version=self.record.version + 1,
            update_time=utcnow(),
            last_sequence=max(self.last_assigned_sequence, self.record.last_sequence),
            sequence_reserved=reserved,
            history_message_count=len(new_history),
            **changes,  # type: ignore[arg-type]
        )
        batch = WriteBatch(
            tenant=self.tenant,
            session_id=self.session_id,
            session=record,
            events=events,
            transcript=transcript,
            history=history,
            history_base=0 if replace_history else len(self.history),
            replace_history=replace_history,
            runs=runs,
            tool_calls=tool_calls,
            idempotency=idempotency,
            release_lease=self._settings.replica_id
            if self.record.state is SessionState.RUNNING and record.state is not SessionState.RUNNING
            else "",
            take_lease=self._settings.replica_id if take_lease else "",
            lease_ttl_seconds=self._settings.lease_ttl_seconds if take_lease else 0.0,
            # `self.record` is the version this step replaces, as committed or read: its config is the stored one.
            config_unchanged=record.config is self.record.config,
        )
        try:
            await self._store.write(batch)
        except VersionConflictError:
            self.stale = True
            raise changed_elsewhere(self.session_id) from None
        self.record = record
        self.history = new_history
        if batch.release_lease:
            self.lease_released = True
        elif take_lease:
            self.lease_released = False
        if transcript:
            self._exporter.append(self.tenant, self.session_id, transcript)
        session_log.committed(self.tenant, self.session_id, events, transcript)
        if events and publish:
            self.publish(events)

    def force_idle(self, events: list[SequencedEvent]) -> None:
        """The store failed at a run's very end: the session must not stay wedged in memory. Start-up recovery
        marks the run INTERRUPTED if the process dies before a later commit."""
        self.record = replace(self.record, state=SessionState.IDLE, active_run_id="", pending_call_ids=())
        self.publish(events)

    # ------------------------------------------------------------------ background work
    def spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def retain(self) -> None:
        """Applies event retention (count and age) when the log may have outgrown it: by a tenth of the count
        since the last purge, or at most hourly for age, not after every run."""
        count = self._settings.event_retention_count
        age = self._settings.event_retention_seconds
        last = self.record.last_sequence
        grown = last - self._purged_at_sequence >= max(1, count // 10)
        if not ((grown and last > count) or time.monotonic() - self._purged_at_time > min(3600.0, age)):
            return
        self._purged_at_sequence = last
        self._purged_at_time = time.monotonic()
        self.spawn(self._purge(count, age), f"retention-{self.session_id}")

    async def _purge(self, count: int, age: float) -> None:
        try:
            await self._store.purge_events(
                self.tenant, self.session_id, keep_last=count, older_than=utcnow() - timedelta(seconds=age)
            )
        except Exception:
            logger.exception("event retention failed for %s", self.session_id, extra={"category": "system"})
