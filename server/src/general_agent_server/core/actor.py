"""The session actor: one per active session. It owns the session's state machine, its run, the event
sequencer and the subscribers. gRPC handlers only validate, call the actor, and relay events.

Commands are serialised by the actor's lock; a run executes as a task the actor owns, so a handler that
is cancelled by its client never interrupts a commit or a run (the run follows on_disconnect)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from general_agent_server.core.clock import utcnow
from general_agent_server.core.content import ContentPart
from general_agent_server.core.errors import ErrorCode, ServiceError
from general_agent_server.core.events import (
    EventBody,
    RunFinished,
    RunOutcome,
    RunReason,
    RunStarted,
    RunTrigger,
    SequencedEvent,
    SessionResetEvent,
    StopReason,
    TurnComplete,
)
from general_agent_server.core.history import HistoryMessage
from general_agent_server.core.model import Credential, ModelClient
from general_agent_server.core.request_builder import user_content_blocks
from general_agent_server.core.runner import RunDriver
from general_agent_server.core.runs import RunRecord, RunStatus
from general_agent_server.core.session import SessionRecord, SessionState
from general_agent_server.core.settings import CoreSettings
from general_agent_server.core.subscribers import Subscriber
from general_agent_server.core.transcript import (
    MessageEntry,
    SessionResetEntry,
    SystemPromptEntry,
    TranscriptBody,
    TranscriptEntry,
)
from general_agent_server.core.transcript_export import TranscriptExporter
from general_agent_server.store.port import SessionStore, WriteBatch

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TurnRequest:
    """A validated turn: the user's parts and its idempotency identity."""

    parts: tuple[ContentPart, ...]
    request_id: str = ""
    body_hash: str = ""
    trigger: RunTrigger = RunTrigger.TURN


@dataclass(kw_only=True)
class ActiveRun:
    run_id: str
    record: RunRecord
    model_ref: str
    credential: Credential
    task: asyncio.Task[None] | None = None
    stop_reason: RunReason | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    # The first model request starts while the admission commits; nothing is emitted before it has.
    admitted: asyncio.Event = field(default_factory=asyncio.Event)
    admission_failed: bool = False


class SessionActor:
    """See module docstring. Create through ActorRegistry, never directly."""

    def __init__(
        self,
        *,
        record: SessionRecord,
        history: list[HistoryMessage],
        store: SessionStore,
        model: ModelClient,
        settings: CoreSettings,
        exporter: TranscriptExporter,
    ) -> None:
        self.record = record
        self.history = history
        self.store = store
        self.model = model
        self.settings = settings
        self.exporter = exporter
        self.lock = asyncio.Lock()
        self.run: ActiveRun | None = None
        self.users = 0
        self.on_idle: Callable[[SessionActor], None] = lambda actor: None
        self._subscribers: list[Subscriber] = []
        # A session left RUNNING by a crash may have sent events that never committed: skip past every
        # reserved sequence. Otherwise everything sent was committed and numbering simply continues.
        if record.state is SessionState.RUNNING:
            self._next_sequence = record.sequence_reserved + 1
        else:
            self._next_sequence = max(record.last_sequence, 0) + 1

    @property
    def tenant(self) -> str:
        return self.record.tenant

    @property
    def session_id(self) -> str:
        return self.record.session_id

    @property
    def idle(self) -> bool:
        return self.run is None and not self._subscribers and self.users == 0

    # ------------------------------------------------------------------ subscribers
    def subscribe(self) -> Subscriber:
        subscriber = Subscriber(max_buffered=self.settings.subscriber_buffer)
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
        for subscriber in self._subscribers:
            for event in events:
                subscriber.offer(event)

    @property
    def last_assigned_sequence(self) -> int:
        return self._next_sequence - 1

    # ------------------------------------------------------------------ sequencing and commits
    def stamp(self, run_id: str, body: EventBody) -> SequencedEvent:
        sequence = self._next_sequence
        self._next_sequence += 1
        return SequencedEvent(
            sequence=sequence, session_id=self.session_id, run_id=run_id, create_time=utcnow(), body=body
        )

    async def emit_buffered(self, run_id: str, body: EventBody) -> None:
        """An event that announces no state change (a delta): sent at once, committed with the next group."""
        if self._next_sequence > self.record.sequence_reserved:
            await self.commit()  # reserves the next block before the sequence is used
        event = self.stamp(run_id, body)
        await self.store.write(
            WriteBatch(tenant=self.tenant, session_id=self.session_id, events=[event]), durable=False
        )
        self.publish([event])

    async def commit(
        self,
        *,
        events: list[SequencedEvent] | None = None,
        transcript: list[TranscriptEntry] | None = None,
        history: list[HistoryMessage] | None = None,
        replace_history: bool = False,
        runs: list[RunRecord] | None = None,
        clear_transcript: bool = False,
        publish: bool = True,
        **changes: object,
    ) -> None:
        """Commits one step atomically (compare-and-set on the session version), then publishes its
        events. The in-memory state changes only after the commit succeeds."""
        events = events or []
        history = history or []
        base = 0 if replace_history else len(self.history)
        last_sequence = max(self.last_assigned_sequence, self.record.last_sequence)
        reserved = self.record.sequence_reserved
        if self._next_sequence + 64 > reserved:
            reserved = self._next_sequence + self.settings.sequence_block
        new_history = history if replace_history else [*self.history, *history]
        record = replace(
            self.record,
            version=self.record.version + 1,
            update_time=utcnow(),
            last_sequence=last_sequence,
            sequence_reserved=reserved,
            history_message_count=len(new_history),
            **changes,  # type: ignore[arg-type]
        )
        batch = WriteBatch(
            tenant=self.tenant,
            session_id=self.session_id,
            session=record,
            events=events,
            transcript=transcript or [],
            history=history,
            history_base=base,
            replace_history=replace_history,
            clear_transcript=clear_transcript,
            runs=runs or [],
        )
        await self.store.write(batch)
        self.record = record
        self.history = new_history
        if clear_transcript:
            self.exporter.truncate(self.tenant, self.session_id)
        if transcript:
            self.exporter.append(self.tenant, self.session_id, transcript)
        if publish and events:
            self.publish(events)

    def transcript_entry(self, run_id: str, body: TranscriptBody, sequence: int = 0) -> TranscriptEntry:
        return TranscriptEntry(timestamp=utcnow(), body=body, sequence=sequence, run_id=run_id)

    # ------------------------------------------------------------------ turns
    def busy_error(self) -> ServiceError:
        return ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            "SESSION_BUSY",
            f"session {self.session_id!r} has an active run; retry when it finishes or use another busy_policy",
            metadata={"active_run_id": self.record.active_run_id, "state": self.record.state.value},
        )

    async def start_turn(self, turn: TurnRequest, *, model_ref: str, credential: Credential, run_id: str) -> ActiveRun:
        """Admits a run: one commit holds the run row, the transcript entries, the user message and
        run_started. Must be called with the lock held. With the stop flag set the run ends at once."""
        if self.record.state is not SessionState.IDLE or self.run is not None:
            raise self.busy_error()
        now = utcnow()
        started = self.stamp(run_id, RunStarted(trigger=turn.trigger, request_id=turn.request_id, model_ref=model_ref))
        run_record = RunRecord(
            tenant=self.tenant,
            session_id=self.session_id,
            run_id=run_id,
            trigger=turn.trigger,
            status=RunStatus.RUNNING,
            started_at=now,
            first_sequence=started.sequence,
            model_ref=model_ref,
            request_id=turn.request_id,
            body_hash=turn.body_hash,
        )
        transcript = [
            self.transcript_entry(
                run_id,
                SystemPromptEntry(prompt=self.record.config.system_prompt, model_ref=model_ref),
                started.sequence,
            ),
            self.transcript_entry(run_id, MessageEntry(content=turn.parts), started.sequence),
        ]
        if self.record.stop_requested:
            # Seed semantics: the message is recorded for people, not given to the model.
            complete = self.stamp(run_id, TurnComplete(stop_reason=StopReason.STOP_REQUESTED))
            finished = self.stamp(
                run_id,
                RunFinished(
                    outcome=RunOutcome.STOPPED,
                    reason=RunReason.STOP_REQUESTED,
                    stop_reason=StopReason.STOP_REQUESTED,
                ),
            )
            done_record = replace(
                run_record,
                status=RunStatus.FINISHED,
                outcome=RunOutcome.STOPPED,
                reason=RunReason.STOP_REQUESTED,
                last_sequence=finished.sequence,
                finished_at=utcnow(),
            )
            await self.commit(events=[started, complete, finished], transcript=transcript, runs=[done_record])
            run = ActiveRun(run_id=run_id, record=done_record, model_ref=model_ref, credential=credential)
            run.finished.set()
            return run
        user_message = HistoryMessage(role="user", content=user_content_blocks(turn.parts), run_id=run_id)
        run = ActiveRun(run_id=run_id, record=run_record, model_ref=model_ref, credential=credential)
        self.run = run
        # The model request goes out while the admission commits (it only reads the history it is given);
        # the driver emits nothing until `admitted` is set.
        driver = RunDriver(self, run, first_history=[*self.history, user_message])
        run.task = asyncio.create_task(driver.execute(), name=f"run-{run_id}")
        try:
            await self.commit(
                events=[started],
                transcript=transcript,
                history=[user_message],
                runs=[run_record],
                state=SessionState.RUNNING,
                active_run_id=run_id,
            )
        except BaseException:
            run.admission_failed = True
            run.task.cancel()
            self.run = None
            raise
        run.admitted.set()
        return run

    def cancel_run(self, reason: RunReason, run_id: str = "") -> str:
        """Stops the active run once (not sticky); returns its id, or "" when nothing matched. Safe to call
        from a handler that is itself being cancelled: it only flags and cancels the run task."""
        run = self.run
        if run is None or (run_id and run.run_id != run_id) or run.task is None:
            return ""
        if run.stop_reason is None:
            run.stop_reason = reason
            run.task.cancel()
        return run.run_id

    async def stop_active_run(self, reason: RunReason) -> None:
        """Cancels the active run and waits until its run_finished is committed."""
        run = self.run
        if run is None:
            return
        self.cancel_run(reason)
        await run.finished.wait()

    def run_ended(self, run: ActiveRun) -> None:
        if self.run is run:
            self.run = None
        run.finished.set()
        self.on_idle(self)

    # ------------------------------------------------------------------ session-level changes
    async def reset(self, reason: str) -> None:
        """Clears history, pending calls, usage snapshot and stop flag; numbering and config stay.
        Must be called with the lock held, after stopping any run."""
        event = self.stamp("", SessionResetEvent(reason=reason))
        await self.commit(
            events=[event],
            transcript=[self.transcript_entry("", SessionResetEntry(reason=reason), event.sequence)],
            history=[],
            replace_history=True,
            pending_call_ids=(),
            usage_snapshot=None,
            stop_requested=False,
            state=SessionState.IDLE,
            active_run_id="",
        )
