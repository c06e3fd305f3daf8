"""The session actor: one per active session. It owns the session's state machine, its run, the event
sequencer and the subscribers. gRPC handlers only validate, call the actor, and relay events.

Commands are serialised by the actor's lock; a run executes as a task the actor owns, so a handler that
is cancelled by its client never interrupts a commit or a run (the run follows on_disconnect)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.content import ContentPart, TextPart
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import (
    COALESCIBLE_KINDS,
    AssistantDelta,
    EventBody,
    ReasoningDelta,
    RunFinished,
    RunOutcome,
    RunReason,
    RunStarted,
    RunTrigger,
    SequencedEvent,
    SessionResetEvent,
    StopReason,
    ToolError,
    ToolResult,
    TurnComplete,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import (
    CallKind,
    CallResult,
    CallStatus,
    IdempotencyRecord,
    ResolvedBy,
    RunRecord,
    RunStatus,
    ToolCallRecord,
)
from general_agent_server.domain.session import (
    HostedToolDefinition,
    SessionConfig,
    SessionMode,
    SessionRecord,
    SessionState,
)
from general_agent_server.domain.transcript import (
    MessageEntry,
    SessionResetEntry,
    SystemPromptEntry,
    ToolResultEntry,
    TranscriptBody,
    TranscriptEntry,
)
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.payloads import MessageHistory
from general_agent_server.hooks.runner import HookRunner
from general_agent_server.hooks.session_hooks import SessionHooks
from general_agent_server.model.port import Credential, ModelClient
from general_agent_server.model.request_builder import user_content_blocks
from general_agent_server.runs.driver import (
    MODEL_HOOKS,
    CommitRefused,
    ModelHookAnswers,
    RunDriver,
    ask_model_hooks,
    prompt_text,
)
from general_agent_server.security.redaction import redact
from general_agent_server.sessions import session_log
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.sessions.subscribers import Subscriber
from general_agent_server.store.port import SessionStore, WriteBatch
from general_agent_server.tools.runtime import ToolCatalog, ToolKind, ToolSet, ToolSpec
from general_agent_server.workspace.checkpoints.recorder import CheckpointRecorder

logger = logging.getLogger(__name__)

CredentialSource = Callable[["SessionActor"], Credential | None]


@dataclass(frozen=True, kw_only=True)
class ActorDeps:
    """What every actor shares: the store, the model, settings, tools and credentials."""

    store: SessionStore
    model: ModelClient
    settings: CoreSettings
    exporter: TranscriptExporter
    catalog: ToolCatalog
    credentials: CredentialSource
    global_hosted_tools: tuple[HostedToolDefinition, ...] = ()
    event_log: EventLog | None = None
    hooks: HookRunner | None = None
    # Records file checkpoints around write/edit/apply_patch (None: not recorded).
    checkpoints: CheckpointRecorder | None = None


@dataclass(kw_only=True)
class TurnRequest:
    """A validated turn: the user's parts and its idempotency identity."""

    parts: tuple[ContentPart, ...]
    request_id: str = ""
    body_hash: str = ""
    trigger: RunTrigger = RunTrigger.TURN


@dataclass(kw_only=True)
class ActiveRun:
    """The run of a session, from admission to its terminal run_finished. While SUSPENDED it has no task."""

    run_id: str
    record: RunRecord
    model_ref: str
    credential: Credential | None
    task: asyncio.Task[None] | None = None
    stop_reason: RunReason | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    # The first model request starts while the admission commits; nothing is emitted before it has.
    admitted: asyncio.Event = field(default_factory=asyncio.Event)
    admission_failed: bool = False
    # What the model/prompt hooks decided (model ref, system prompt, prependContext): kept for the whole
    # run, continuations after a suspension included.
    prompt_plan: tuple[str, str | None, str] | None = None
    # The model hooks' answers, asked at admission so that run_started names the model the run uses.
    model_hooks: ModelHookAnswers | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Resolution:
    """What resolving a hosted call did: the sequence of its tool_result/tool_error, and whether it was an
    identical replay of an earlier submit (the caller replays the log from that sequence)."""

    sequence: int
    replay: bool = False


_STOP_MESSAGES = {
    RunReason.SUPERSEDED: ("superseded by a new turn", ResolvedBy.SUPERSEDED),
    RunReason.SESSION_RESET: ("cancelled: session reset", ResolvedBy.RESET),
    RunReason.SESSION_DELETED: ("cancelled: session deleted", ResolvedBy.STOP),
    RunReason.INTERRUPTED: ("cancelled: server shutting down", ResolvedBy.INTERRUPTED),
}


def stop_message(reason: RunReason) -> tuple[str, ResolvedBy]:
    return _STOP_MESSAGES.get(reason, ("cancelled: run stopped", ResolvedBy.STOP))


def payload_hash(result: CallResult) -> str:
    text = json.dumps(
        {
            "content": [
                p.text if isinstance(p, TextPart) else {"image": hashlib.sha256(p.data).hexdigest()}
                for p in result.content
            ],
            "details": result.details_json,
            "error": result.is_error,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


class SessionActor:
    """See module docstring. Create through ActorRegistry, never directly."""

    def __init__(self, *, record: SessionRecord, history: list[HistoryMessage], deps: ActorDeps) -> None:
        self.record = record
        self.history = history
        self.deps = deps
        self.store = deps.store
        self.model: ModelClient = deps.model
        self.settings = deps.settings
        self.exporter = deps.exporter
        self.lock = asyncio.Lock()
        self._commit_lock = asyncio.Lock()
        # Delta coalescing (emit_delta): the merged delta waiting to be sent, and whether a send happened
        # in this turn of the event loop.
        self._pending_delta: tuple[str, type[AssistantDelta] | type[ReasoningDelta], list[str]] | None = None
        self._delta_window_open = False
        # When this actor last applied event retention (see _retention_due).
        self._purged_at_sequence = 0
        self._purged_at_time = time.monotonic()
        self.run: ActiveRun | None = None
        # The calls of the current tool round (pending hosted calls while SUSPENDED).
        self.round: list[ToolCallRecord] = []
        self.users = 0
        self.on_idle: Callable[[SessionActor], None] = lambda actor: None
        self._subscribers: list[Subscriber] = []
        self._deadlines: dict[str, asyncio.TimerHandle] = {}
        self._queue: deque[asyncio.Future[None]] = deque()
        self.background: set[asyncio.Task[None]] = set()
        self.hooks = SessionHooks(self, deps.hooks)
        self._toolset: tuple[SessionConfig, SessionMode, ToolSet] | None = None
        self.session_started_at = time.monotonic()
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
        return self.run is None and not self._subscribers and self.users == 0 and not self._queue

    @property
    def workspace(self) -> Path:
        if self.settings.shared_workspace:
            return self.settings.workspace_root
        return self.settings.workspace_root / self.tenant / self.session_id

    # ------------------------------------------------------------------ tools
    def toolset(self) -> ToolSet:
        """The session's tools, rebuilt only when its config or mode changes (the set keeps its compiled
        argument validators between model calls)."""
        config, mode = self.record.config, self.record.identity.mode
        cached = self._toolset
        # Identity, not equality: configs are frozen and replaced whole when they change.
        if cached is None or cached[0] is not config or cached[1] is not mode:
            cached = (config, mode, self._build_toolset())
            self._toolset = cached
        return cached[2]

    def _build_toolset(self) -> ToolSet:
        hosted = [
            ToolSpec(
                name=t.name,
                description=t.description,
                input_schema=t.input_schema,
                kind=ToolKind.HOSTED,
                timeout_seconds=t.timeout_seconds,
            )
            for t in (*self.deps.global_hosted_tools, *self.record.config.hosted_tools)
        ]
        return self.deps.catalog.for_session(
            coding=self.record.identity.mode is SessionMode.CODING,
            allowed=self.record.config.allowed_tools,
            extra=hosted,
        )

    def hosted_deadline_seconds(self, spec: ToolSpec) -> float:
        wanted = (
            spec.timeout_seconds
            or self.record.config.limits.hosted_call_timeout_seconds
            or self.settings.hosted_call_timeout_seconds
        )
        return min(wanted, self.settings.hosted_call_timeout_max_seconds)

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
        if self.deps.event_log is not None:
            self.deps.event_log.events(self.tenant, self.session_id, events)
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
        # Every event is stamped before it is stored, published or logged: one redaction covers them all.
        return SequencedEvent(
            sequence=sequence, session_id=self.session_id, run_id=run_id, create_time=utcnow(), body=redact(body)
        )

    async def emit_delta(self, run_id: str, body: AssistantDelta | ReasoningDelta, *, first: bool = False) -> None:
        """Deltas are numbered after coalescing (docs/protocol.md). The first delta of a content block goes
        out at once; later deltas arriving before the event loop comes round again (the previous send
        still in flight) merge into one event, sent at the next turn of the loop or before any other
        event. What is numbered is what every subscriber and the log receive: nothing merges later."""
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
        asyncio.get_running_loop().call_soon(self._close_delta_window)
        await self.emit_buffered(run_id, body)

    def _close_delta_window(self) -> None:
        self._delta_window_open = False
        if self._pending_delta is not None:
            self._spawn(self.flush_deltas(), f"flush-deltas-{self.session_id}")

    async def emit_buffered(self, run_id: str, body: EventBody) -> None:
        """An event that announces no state change (a delta): sent at once, committed with the next group."""
        if self._pending_delta is not None and body.kind not in COALESCIBLE_KINDS:
            await self.flush_deltas()
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
        tool_calls: list[ToolCallRecord] | None = None,
        clear_transcript: bool = False,
        derive: Callable[[SessionRecord], dict[str, object]] | None = None,
        transcript_filtered: bool = False,
        idempotency: IdempotencyRecord | None = None,
        **changes: object,
    ) -> None:
        """Commits one step atomically (compare-and-set on the session version), then publishes its
        events. The in-memory state changes only after the commit succeeds. A cancellation that arrives
        meanwhile is delivered after the commit has landed, so memory and store never disagree.

        Commits come from the run task and from commands (inject, stop flag, overrides, submits) that do
        not wait for the run: they are serialised here, each built from the state the previous one left,
        so two of them never race on the session version or lose each other's changes. Changes that
        depend on the current state come from `derive`, called with the record in turn; it may raise
        CommitRefused, and then nothing is written.

        Transcript entries pass the write-path hooks here, in commit order, unless the caller has already
        passed them (`transcript_filtered`, to keep the seed's hook order within a tool round)."""

        async def serialised() -> None:
            async with self._commit_lock:
                # Write-path hooks see entries in commit order (spec 7); they shape the transcript only.
                entries = transcript or []
                if not transcript_filtered:
                    entries = await self.hooks.filter_transcript(entries)
                await self._commit_now(
                    events=events or [],
                    transcript=entries,
                    history=history or [],
                    replace_history=replace_history,
                    runs=runs or [],
                    tool_calls=tool_calls or [],
                    clear_transcript=clear_transcript,
                    changes={**changes, **derive(self.record)} if derive is not None else changes,
                    idempotency=idempotency,
                )

        write = asyncio.ensure_future(serialised())
        cancelled = False
        while not write.done():
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                cancelled = True
        write.result()
        if cancelled:
            raise asyncio.CancelledError

    async def _commit_now(
        self,
        *,
        events: list[SequencedEvent],
        transcript: list[TranscriptEntry],
        history: list[HistoryMessage],
        replace_history: bool,
        runs: list[RunRecord],
        tool_calls: list[ToolCallRecord],
        clear_transcript: bool,
        changes: dict[str, object],
        idempotency: IdempotencyRecord | None = None,
    ) -> None:
        # Nothing is stored or exported with a secret the server knows in it (model text and host input included).
        transcript, history, runs, tool_calls = redact((transcript, history, runs, tool_calls))
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
            transcript=transcript,
            history=history,
            history_base=base,
            replace_history=replace_history,
            clear_transcript=clear_transcript,
            runs=runs,
            tool_calls=tool_calls,
            idempotency=idempotency,
        )
        await self.store.write(batch)
        self.record = record
        self.history = new_history
        if clear_transcript:
            self.exporter.truncate(self.tenant, self.session_id)
        if transcript:
            self.exporter.append(self.tenant, self.session_id, transcript)
        session_log.committed(self.tenant, self.session_id, events, transcript)
        if events:
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
        transcript = [
            self.transcript_entry(
                run_id, SystemPromptEntry(prompt=self.record.config.system_prompt, model_ref=model_ref)
            ),
            self.transcript_entry(run_id, MessageEntry(content=turn.parts)),
        ]
        self.hooks.begin_run()
        self._fire_session_start(run_id)
        answers: ModelHookAnswers | None = None
        if self.hooks.wants(MODEL_HOOKS) and not self.record.stop_requested:
            # Hook order: the admission's transcript writes, then the model hooks; run_started, committed
            # with those writes, then names the model the run really uses.
            transcript = await self.hooks.filter_transcript(transcript)
            answers = await ask_model_hooks(
                self.hooks,
                run_id,
                prompt_text(turn.parts),
                self.history,
                model_ref,
                budget=self.settings.run_deadline_seconds,
            )
            model_ref = answers.model_ref
        started = self.stamp(run_id, RunStarted(trigger=turn.trigger, request_id=turn.request_id, model_ref=model_ref))
        transcript = [
            replace(
                entry,
                sequence=started.sequence,
                body=replace(entry.body, model_ref=model_ref)
                if isinstance(entry.body, SystemPromptEntry)
                else entry.body,
            )
            for entry in transcript
        ]
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
        if self.deps.event_log is not None:
            self.deps.event_log.query_started(self.tenant, self.session_id, run_id, turn.parts)
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
            done_record = run_record.finished(
                RunOutcome.STOPPED, RunReason.STOP_REQUESTED, sequence=finished.sequence, at=finished.create_time
            )
            await self.commit(events=[started, complete, finished], transcript=transcript, runs=[done_record])
            run = ActiveRun(run_id=run_id, record=done_record, model_ref=model_ref, credential=credential)
            run.finished.set()
            return run
        user_message = HistoryMessage(role="user", content=user_content_blocks(turn.parts), run_id=run_id)
        run = ActiveRun(
            run_id=run_id, record=run_record, model_ref=model_ref, credential=credential, model_hooks=answers
        )
        self.run = run
        # The model request goes out while the admission commits (it only reads the history it is given);
        # the driver emits nothing until `admitted` is set.
        driver = RunDriver(self, run, first_history=[*self.history, user_message])
        run.task = asyncio.create_task(driver.execute(), name=f"run-{run_id}")
        try:
            await self.commit(
                events=[started],
                transcript=transcript,
                transcript_filtered=answers is not None,
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

    def _fire_session_start(self, run_id: str) -> None:
        """session_start: the first turn of this session in this process. resumedFrom is the fork source
        for a fork, the session itself when it had history before, empty for a fresh session."""
        if self.hooks.session_started:
            return
        self.hooks.session_started = True
        self.session_started_at = time.monotonic()
        origin = self.record.forked_from
        resumed_from = origin.session_id if origin is not None else (self.session_id if self.history else "")
        event = {"sessionId": self.session_id, "sessionKey": self.record.identity.session_key}
        if resumed_from:
            event["resumedFrom"] = resumed_from
        self.hooks.fire("session_start", event, run_id)

    async def end_session_hooks(self, *, wait: bool, deleted: bool = False) -> None:
        """session_end: when the session object ends after session_start fired in this process (as in the
        seed), and always when the session is deleted."""
        if not self.hooks.session_started and not deleted:
            return
        self.hooks.session_started = False
        event = {
            "sessionId": self.session_id,
            "sessionKey": self.record.identity.session_key,
            "messageCount": await self.store.count_transcript(self.tenant, self.session_id),
            "durationMs": int((time.monotonic() - self.session_started_at) * 1000),
        }
        if wait:
            await self.hooks.fire_and_wait("session_end", event)
        else:
            self.hooks.fire("session_end", event, "")

    def cancel_run(self, reason: RunReason, run_id: str = "") -> str:
        """Stops an executing run once (not sticky); returns its id, or "" when nothing matched. Safe to
        call from a handler that is itself being cancelled: it only flags and cancels the run task. A
        suspended run has no task: stop it with stop_run."""
        run = self.run
        if run is None or (run_id and run.run_id != run_id) or run.task is None or run.task.done():
            return ""
        if run.stop_reason is None:
            run.stop_reason = reason
            run.task.cancel()
        return run.run_id

    async def stop_run(self, reason: RunReason, run_id: str = "") -> str:
        """Stops the active run, executing or suspended, and waits for its terminal run_finished. Call with
        the lock held."""
        run = self.run
        if run is None or (run_id and run.run_id != run_id):
            return ""
        if run.task is not None and not run.task.done():
            self.cancel_run(reason)
            await run.finished.wait()
            return run.run_id
        if self.record.state is SessionState.SUSPENDED:
            run.stop_reason = reason
            self.disarm_deadlines()
            await RunDriver(self, run).close_suspended(reason)
        return run.run_id

    def run_task_done(self, run: ActiveRun, *, suspended: bool) -> None:
        """The run's task ended: either the run finished, or it suspended on hosted calls."""
        run.task = None
        if suspended:
            return
        if self.run is run:
            self.run = None
        run.finished.set()
        self._wake_queue()
        if self._retention_due():
            self._spawn(self._apply_retention(), f"retention-{self.session_id}")
        self.on_idle(self)

    def _retention_due(self) -> bool:
        """Retention is a store write: do it when the log may have outgrown its count (by a tenth since the
        last purge) or its age (checked at most hourly), not after every run."""
        count = self.settings.event_retention_count
        grown = self.record.last_sequence - self._purged_at_sequence >= max(1, count // 10)
        due = (grown and self.record.last_sequence > count) or (
            time.monotonic() - self._purged_at_time > min(3600.0, self.settings.event_retention_seconds)
        )
        if due:
            self._purged_at_sequence = self.record.last_sequence
            self._purged_at_time = time.monotonic()
        return due

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _apply_retention(self) -> None:
        """Bounded event retention per session (count and age); cursors older than it get EVENTS_EXPIRED."""
        try:
            await self.store.purge_events(
                self.tenant,
                self.session_id,
                keep_last=self.settings.event_retention_count,
                older_than=utcnow() - timedelta(seconds=self.settings.event_retention_seconds),
            )
        except Exception:
            logger.exception("event retention failed for %s", self.session_id, extra={"category": "system"})

    # ------------------------------------------------------------------ hosted calls
    def arm_deadlines(self, records: list[ToolCallRecord]) -> None:
        loop = asyncio.get_running_loop()
        for record in records:
            if record.deadline is None or record.call_id in self._deadlines:
                continue
            delay = max(0.0, (record.deadline - utcnow()).total_seconds())
            self._deadlines[record.call_id] = loop.call_later(delay, self._on_deadline, record.call_id)

    def disarm_deadlines(self) -> None:
        for handle in self._deadlines.values():
            handle.cancel()
        self._deadlines.clear()

    def _on_deadline(self, call_id: str) -> None:
        self._deadlines.pop(call_id, None)
        self._spawn(self._expire(call_id), f"hosted-timeout-{call_id}")

    async def _expire(self, call_id: str) -> None:
        async with self.lock:
            record = next((r for r in self.round if r.call_id == call_id), None)
            if record is None or record.status is not CallStatus.PENDING:
                return
            result = CallResult(content=(TextPart(text="hosted tool timed out"),), is_error=True)
            try:
                await self.resolve_hosted(call_id, result, ResolvedBy.TIMEOUT, payload="", credential=None)
            except ServiceError:
                logger.exception("could not time out hosted call %s", call_id, extra={"category": "tool_result"})

    async def wait_until_exposed(self, call_id: str) -> None:
        """Spec 6: a submit that arrives before the suspension commit (the host may know the call id from
        tool_call while the round's local tools still run) waits until the run has suspended or ended, and
        applies after it. Resolving it earlier would suspend a running run or start a second driver."""
        while (run := self.run) is not None and run.task is not None and not run.task.done():
            if not any(r.call_id == call_id and r.status is CallStatus.PENDING for r in self.round):
                return
            await asyncio.wait([run.task])

    async def resolve_hosted(
        self,
        call_id: str,
        result: CallResult,
        resolved_by: ResolvedBy,
        *,
        payload: str,
        credential: Credential | None,
    ) -> Resolution:
        """Resolves one pending hosted call (lock held). The last resolution continues the run; a submit
        resolves the credential first so that a missing one leaves the call pending (spec 6)."""
        result = redact(result)  # the host's answer reaches the model, hooks and the store only redacted
        record = next((r for r in self.round if r.call_id == call_id), None)
        if record is None:
            stored = await self.store.get_tool_call(self.tenant, self.session_id, call_id)
            if stored is None or stored.kind is not CallKind.HOSTED:
                raise ServiceError(
                    ErrorCode.NOT_FOUND,
                    "UNKNOWN_TOOL_CALL",
                    f"no hosted tool call {call_id!r} in session {self.session_id!r}",
                    metadata={"call_id": call_id},
                )
            record = stored
        if record.status is CallStatus.RESOLVED:
            if (
                resolved_by is ResolvedBy.SUBMIT
                and record.resolved_by is ResolvedBy.SUBMIT
                and record.payload_hash == payload
            ):
                return Resolution(sequence=record.resolve_sequence, replay=True)
            raise ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                "TOOL_CALL_ALREADY_RESOLVED",
                f"hosted tool call {call_id!r} was already resolved",
                metadata={"call_id": call_id, "resolved_by": (record.resolved_by or ResolvedBy.SUBMIT).value},
            )
        run = self.run
        if run is None:
            raise ServiceError(ErrorCode.INTERNAL, "INTERNAL", f"pending call {call_id!r} without an active run")
        remaining = [r for r in self.round if r.status is CallStatus.PENDING and r.call_id != call_id]
        if not remaining and credential is None and resolved_by is not ResolvedBy.SUBMIT:
            credential = self.deps.credentials(self)
        body: EventBody = (
            ToolError(
                call_id=call_id,
                tool_name=record.tool_name,
                error=_first_text(result),
                details_json=result.details_json,
            )
            if result.is_error
            else ToolResult(
                call_id=call_id, tool_name=record.tool_name, output=result.content, details_json=result.details_json
            )
        )
        event = self.stamp(run.run_id, body)
        resolved = replace(
            record,
            status=CallStatus.RESOLVED,
            result=result,
            resolved_by=resolved_by,
            payload_hash=payload,
            resolve_sequence=event.sequence,
        )
        self.round = [resolved if r.call_id == call_id else r for r in self.round]
        handle = self._deadlines.pop(call_id, None)
        if handle is not None:
            handle.cancel()
        self.hooks.after_tool_call(run.run_id, record.tool_name, call_id, record.input_json, result)
        transcript = [
            self.transcript_entry(
                run.run_id,
                ToolResultEntry(
                    call_id=call_id,
                    tool_name=record.tool_name,
                    output=result.content,
                    details_json=result.details_json,
                    is_error=result.is_error,
                ),
                event.sequence,
            )
        ]
        if remaining:
            still = tuple(r.call_id for r in remaining)
            suspended = self.stamp(
                run.run_id,
                RunFinished(
                    outcome=RunOutcome.SUSPENDED,
                    stop_reason=StopReason.TOOL_USE,
                    pending_call_ids=still,
                    usage=run.record.usage,
                ),
            )
            await self.commit(
                events=[event, suspended], transcript=transcript, tool_calls=[resolved], pending_call_ids=still
            )
            return Resolution(sequence=event.sequence)
        run.record = replace(run.record, status=RunStatus.RUNNING)
        run.credential = credential
        await self.commit(
            events=[event],
            transcript=transcript,
            tool_calls=[resolved],
            runs=[run.record],
            state=SessionState.RUNNING,
            pending_call_ids=(),
        )
        run.admitted.set()
        driver = RunDriver(self, run, resume_round=list(self.round))
        run.task = asyncio.create_task(driver.execute(), name=f"run-{run.run_id}")
        return Resolution(sequence=event.sequence)

    # ------------------------------------------------------------------ steering and stop
    async def inject(self, parts: tuple[ContentPart, ...], idempotency: IdempotencyRecord | None = None) -> str:
        """Commits a steering message to the active run's queue (lock held); "" when the session is idle.
        `idempotency` (its answer naming the active run) commits with the message."""
        run = self.run
        if run is None or self.record.state is SessionState.IDLE:
            return ""

        def enqueue(record: SessionRecord) -> dict[str, object]:
            # Decided in commit order: a run that has committed its end takes no more messages.
            if record.state is SessionState.IDLE or record.active_run_id != run.run_id:
                raise CommitRefused
            return {"pending_injections": (*record.pending_injections, parts)}

        try:
            await self.commit(
                transcript=[self.transcript_entry(run.run_id, MessageEntry(content=parts, injected=True))],
                derive=enqueue,
                idempotency=idempotency,
            )
        except CommitRefused:
            return ""
        return run.run_id

    async def set_stop_flag(self, value: bool) -> bool:
        previous = self.record.stop_requested
        if previous != value:
            await self.commit(stop_requested=value)
        return previous

    # ------------------------------------------------------------------ ENQUEUE
    async def wait_turn(self, *, max_queued: int, timeout: float) -> None:  # noqa: ASYNC109
        """Waits (FIFO) until the session is idle; the caller then takes the lock and starts its run."""
        if len(self._queue) >= max_queued:
            raise ServiceError(
                ErrorCode.RESOURCE_EXHAUSTED,
                "RESOURCE_LIMIT",
                f"session {self.session_id!r} already has {max_queued} queued turns",
                metadata={"limit": "max_queued_turns", "value": str(max_queued)},
                retry_after_seconds=1.0,
            )
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(ticket)
        if self.run is None and self._queue[0] is ticket:
            ticket.set_result(None)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(ticket)
        except TimeoutError:
            raise ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                "SESSION_BUSY",
                f"the queued turn waited {timeout:g}s for session {self.session_id!r}",
                metadata={"active_run_id": self.record.active_run_id, "state": self.record.state.value},
            ) from None
        finally:
            # Served, timed out or abandoned by its caller: either way it leaves the queue.
            if ticket in self._queue:
                self._queue.remove(ticket)
            if not ticket.done():
                ticket.cancel()

    def _wake_queue(self) -> None:
        if self.run is None and self._queue and not self._queue[0].done():
            self._queue[0].set_result(None)

    def queue_done(self) -> None:
        """Called by a served ENQUEUE caller once it has started (or failed to start) its run."""
        self._wake_queue()

    # ------------------------------------------------------------------ session-level changes
    async def reset(self, reason: str, idempotency: IdempotencyRecord | None = None) -> None:
        """Clears history, pending calls, usage snapshot and stop flag; numbering and config stay.
        Must be called with the lock held, after stopping any run."""
        await self.hooks.fire_and_wait(
            "before_reset",
            {
                "sessionFile": str(self.exporter.path_for(self.tenant, self.session_id)),
                "messages": MessageHistory(tuple(m.api_message() for m in self.history)),
                "reason": reason,
            },
        )
        event = self.stamp("", SessionResetEvent(reason=reason))
        self.round = []
        await self.commit(
            events=[event],
            transcript=[self.transcript_entry("", SessionResetEntry(reason=reason), event.sequence)],
            history=[],
            replace_history=True,
            pending_call_ids=(),
            pending_injections=(),
            usage_snapshot=None,
            stop_requested=False,
            state=SessionState.IDLE,
            active_run_id="",
            idempotency=idempotency,
        )

    def hosted_deadline(self, spec: ToolSpec) -> timedelta:
        return timedelta(seconds=self.hosted_deadline_seconds(spec))


def _first_text(result: CallResult) -> str:
    for part in result.content:
        if isinstance(part, TextPart) and part.text:
            return part.text
    return "Tool execution failed"
