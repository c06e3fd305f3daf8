"""A loaded session: the one owner of its mutable state and of its run (docs/architecture.md).

Concurrency guarantees:
- Commands (admit a turn, resolve a hosted call, inject, stop, clear the stop flag, cancel, reset, overrides,
  restore, fork reads) are applied one at a time under the session's command lock, which only this class takes.
  Each command decides from the state the previous one left: the busy policies, the idempotency keys and the
  pending calls are checked and changed atomically.
- A run executes as a task this object owns, so a handler cancelled by its client never interrupts a commit or
  a run (the run follows on_disconnect). While the task is alive only its driver changes the run; while the run
  is suspended (no task) only commands do.
- The driver's first model request goes out while the admission commits; it emits nothing until `admitted` is
  set (the commit has landed), and a failed admission cancels it before anything was emitted.
- A submit that arrives before the suspension commit (the host may know the call id from tool_call while the
  round's local tools still run) waits outside the lock until the run has suspended or ended, then applies.
- The durable state (record, history), the sequencer, commits and subscribers belong to the session's
  `SessionLedger` (sessions/ledger.py), which states its own guarantees."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from general_agent_server.domain.codec import CONTENT_PARTS
from general_agent_server.domain.content import ContentPart, TextPart
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import (
    CompactionReason,
    RunReason,
    RunTrigger,
    SessionResetEvent,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import (
    ApprovalDecision,
    CallKind,
    CallResult,
    CallStatus,
    ResolvedBy,
    RunStatus,
)
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.domain.transcript import MessageEntry, SessionResetEntry
from general_agent_server.hooks.payloads import MessageHistory
from general_agent_server.hooks.session_hooks import SessionHooks
from general_agent_server.mcp_servers.servers import SessionServers
from general_agent_server.model.port import Credential, ModelClient
from general_agent_server.runs.admission import prepare_admission
from general_agent_server.runs.approvals import ApprovalAnswer, timeout_answer
from general_agent_server.runs.compaction import CompactionOutcome, Compactor, outcome_from_json, outcome_to_json
from general_agent_server.runs.deadlines import Deadlines
from general_agent_server.runs.driver import RunDriver
from general_agent_server.runs.hosted import resolve_approval, resolve_hosted
from general_agent_server.runs.state import ActiveRun, Admission, BusyPolicy, Resolution, TurnRequest, payload_hash
from general_agent_server.runs.turn_queue import TurnQueue
from general_agent_server.sessions.deps import SessionDeps
from general_agent_server.sessions.idempotency import KeyedRequest
from general_agent_server.sessions.ledger import CommitRefused, LedgerSettings, SessionLedger
from general_agent_server.sessions.relay import POLL_SECONDS, Body
from general_agent_server.sessions.remote_tail import RemoteTail
from general_agent_server.sessions.replica_sync import ReplicaSync
from general_agent_server.sessions.session_tools import SessionTools
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.sessions.subscribers import Subscriber
from general_agent_server.store.port import SessionStore, StoreUnavailableError
from general_agent_server.tenants.slots import RunSlot
from general_agent_server.tools.runtime import ToolContext, ToolSet, ToolSpec

logger = logging.getLogger(__name__)

T = TypeVar("T")


def no_api_key(session_id: str, why: str) -> ServiceError:
    return ServiceError(ErrorCode.FAILED_PRECONDITION, "NO_API_KEY", why, metadata={"session_id": session_id})


class LiveSession:
    """See the module docstring for what it guarantees. Created by the session cache (sessions/cache.py)."""

    def __init__(self, *, record: SessionRecord, history: list[HistoryMessage], deps: SessionDeps) -> None:
        self.deps = deps
        settings = deps.settings
        self.ledger = SessionLedger(
            record=record,
            history=history,
            store=deps.store,
            exporter=deps.exporter,
            event_log=deps.event_log,
            settings=LedgerSettings(
                sequence_block=settings.sequence_block,
                replica_id=settings.replica_id,
                subscriber_buffer=settings.subscriber_buffer,
                event_retention_count=settings.event_retention_count,
                event_retention_seconds=settings.event_retention_seconds,
            ),
        )
        self.hooks = SessionHooks(self.ledger, self.workspace, deps.hooks)
        self.ledger.transcript_filter = self.hooks.filter_transcript
        self._lock = asyncio.Lock()
        self.run: ActiveRun | None = None
        # Handlers and streams using the session now; the cache never evicts a session in use.
        self.users = 0
        self.on_idle: Callable[[LiveSession], None] = lambda session: None
        self._queue = TurnQueue(record.session_id)
        self.tools = SessionTools(self)
        self.sync = ReplicaSync(self, self._lock)
        self.tail = RemoteTail(self)
        # The run slot the executing run holds (none while idle or suspended).
        self._slot: RunSlot | None = None
        # Weak: an armed deadline must not keep an evicted session alive through a reference cycle.
        ref = weakref.ref(self)

        def expire(call_id: str) -> None:
            session = ref()
            if session is not None:
                session.ledger.spawn(session._expire(call_id), f"hosted-timeout-{call_id}")

        self.deadlines = Deadlines(expire)

        def guard() -> None:
            session = ref()
            if session is not None:
                session.sync.check_writable()

        self.ledger.guard = guard

    # ------------------------------------------------------------------ what it is
    @property
    def tenant(self) -> str:
        return self.ledger.tenant

    @property
    def session_id(self) -> str:
        return self.ledger.session_id

    @property
    def record(self) -> SessionRecord:
        return self.ledger.record

    @property
    def history(self) -> list[HistoryMessage]:
        return self.ledger.history

    @property
    def settings(self) -> CoreSettings:
        return self.deps.settings

    @property
    def model(self) -> ModelClient:
        return self.deps.model

    @property
    def store(self) -> SessionStore:
        return self.deps.store

    @property
    def queued_turns(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        return self.run is None and not self.ledger.has_subscribers and self.users == 0 and not len(self._queue)

    @property
    def workspace(self) -> Path:
        if self.settings.shared_workspace:
            return self.settings.workspace_dir
        return self.settings.workspace_dir / self.tenant / self.session_id

    @property
    def session_file(self) -> str:
        return str(self.deps.exporter.path_for(self.tenant, self.session_id))

    # ------------------------------------------------------------------ replicas (sessions/replica_sync.py)
    @property
    def owns_run(self) -> bool:
        return self.sync.owns_run

    @property
    def runs_elsewhere(self) -> bool:
        return self.sync.runs_elsewhere

    async def own_run(self) -> None:
        await self.sync.own_run()

    def disown_run(self) -> None:
        self.sync.disown_run()

    async def revalidate(self) -> bool:
        return await self.sync.revalidate()

    async def restore_stored_suspension(self) -> None:
        await self.sync.restore_stored_suspension()

    async def _relayed(self, body: Body) -> Body | None:
        """Lock held: the answer of the replica executing the session's run, when another one does
        (sessions/relay.py); None when the command applies here."""
        relay = self.deps.relay
        while relay is not None and self.runs_elsewhere:
            answer = await relay.send(self.tenant, self.session_id, body)
            if answer is not None:
                return answer
            await self.sync.revalidate_locked()  # the run ended, or its dead owner's run is repaired
        return None

    @property
    def live_point(self) -> int:
        """The newest sequence a live-only stream starts after: what this copy numbered, or, while another
        replica's run numbers the session, what the store had committed when the copy was read (the copy's
        counter then sits at the end of the reserved block)."""
        return self.record.last_sequence if self.runs_elsewhere else self.ledger.last_assigned_sequence

    def subscribe(self) -> Subscriber:
        subscriber = self.ledger.subscribe()
        self.tail.ensure()  # another replica's runs reach this subscriber too (sessions/remote_tail.py)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.ledger.unsubscribe(subscriber)

    # ------------------------------------------------------------------ what its runs use (runs/host.py)
    def toolset(self) -> ToolSet:
        return self.tools.toolset()

    @property
    def mcp(self) -> SessionServers | None:
        return self.tools.mcp

    async def prepare_tools(self) -> None:
        await self.tools.prepare()

    def hosted_deadline(self, spec: ToolSpec) -> timedelta:
        return self.tools.hosted_deadline(spec)

    def tool_context(self, run_id: str, call_id: str) -> ToolContext:
        return self.tools.context(run_id, call_id)

    def credential(self) -> Credential | None:
        return self.deps.credentials.resolve(
            tenant=self.tenant,
            session_profile_id=self.record.config.auth_profile_id,
            memory_api_key=self.deps.keys.get(self.tenant, self.session_id),
        )

    def require_credential(self) -> Credential:
        credential = self.credential()
        if credential is None:
            why = self.deps.credentials.why_none(
                tenant=self.tenant, session_profile_id=self.record.config.auth_profile_id
            )
            raise no_api_key(self.session_id, why)
        return credential

    async def run_cancelled(self, run_id: str) -> None:
        await self.deps.catalog.run_cancelled(self.tenant, self.session_id, run_id)

    def run_task_done(self, run: ActiveRun, *, suspended: bool) -> None:
        run.task = None
        self._release_slot()
        self.disown_run()  # a suspended session belongs to no replica
        if suspended:
            self.tools.release_mcp()
            return
        if self.run is run:
            self.run = None
        run.finished.set()
        self._wake_queue()
        self.ledger.retain()
        self.tools.release_mcp()
        self.on_idle(self)

    def _release_slot(self) -> None:
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    def _resumed(self, resolution: Resolution) -> Resolution:
        """A suspended run its host's answer continued holds a slot again (never refused: it was admitted)."""
        run = resolution.continued
        slots = self.deps.run_slots
        if run is not None and run.task is not None and slots is not None and self._slot is None:
            self._slot = slots.take(self.tenant)
        return resolution

    # ------------------------------------------------------------------ turns
    def busy_error(self) -> ServiceError:
        return ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            "SESSION_BUSY",
            f"session {self.session_id!r} has an active run; retry when it finishes or use another busy_policy",
            metadata={"active_run_id": self.record.active_run_id, "state": self.record.state.value},
        )

    async def admit(self, turn: TurnRequest, policy: BusyPolicy) -> Admission:
        """Starts a run, or applies the busy policy (docs/protocol.md, busy policies). The stop flag is checked
        after the policy: a run started while it is set ends stop_requested."""
        if policy is BusyPolicy.ENQUEUE:
            return await self._admit_queued(turn)
        async with self._lock:
            await self._settle()
            self.deps.gate.check()
            if self.deps.run_slots is not None and self.record.state is SessionState.IDLE:
                self.deps.run_slots.check(self.tenant)  # shed before the lease's store write
            if not self.owns_run:
                if policy is BusyPolicy.STEER and (steered := await self._steer_elsewhere(turn)):
                    return Admission(run=None, steered_run_id=steered)
                await self._own_for_turn()
            try:
                if self.record.state is not SessionState.IDLE:
                    if policy is BusyPolicy.REJECT:
                        raise self.busy_error()
                    if policy is BusyPolicy.STEER:
                        return Admission(run=None, steered_run_id=await self._inject(turn.parts, None))
                    await self._stop_run(RunReason.SUPERSEDED)
                trigger = RunTrigger.STEER if policy is BusyPolicy.STEER else RunTrigger.TURN
                return Admission(run=await self._start(replace(turn, trigger=trigger), fresh=True))
            finally:
                self.disown_run()

    async def _steer_elsewhere(self, turn: TurnRequest) -> str:
        """A STEER turn for a run another replica executes: its message goes to that run (the id; "" when the
        run ended meanwhile and the turn starts a run here)."""
        body = {"kind": "inject", "parts": CONTENT_PARTS.dumps(turn.parts), "request_id": "", "body_hash": ""}
        answer = await self._relayed(body)
        return str(answer["run_id"]) if answer is not None else ""

    async def _own_for_turn(self) -> None:
        """Takes the lease, then reads the state again (so no other replica starts a run meanwhile). While
        another replica runs the session, its turn is refused as on one server: SESSION_BUSY with the run."""
        try:
            await self.own_run()
        except StoreUnavailableError:
            raise  # the store cannot take the lease's write now (disk full, locked): not another replica's run
        except ServiceError:
            await self.sync.revalidate_locked()
            raise self.busy_error() from None
        await self.sync.revalidate_locked()

    async def _admit_queued(self, turn: TurnRequest) -> Admission:
        settings = self.settings
        waited = False
        while True:
            if not waited and (self.run is not None or self.record.state is not SessionState.IDLE):
                waited = self._log_queued()
            await self._queue.wait(
                idle=lambda: self.run is None,
                record=lambda: self.record,
                max_queued=settings.max_queued_turns,
                timeout=settings.enqueue_timeout,
            )
            try:
                async with self._lock:
                    await self._settle()
                    await self.sync.revalidate_locked()
                    if self.record.state is SessionState.IDLE and self.run is None:
                        trigger = RunTrigger.ENQUEUED_TURN if waited else RunTrigger.TURN
                        return Admission(run=await self._start(replace(turn, trigger=trigger)))
                    waited = waited or self._log_queued()
            finally:
                self._wake_queue()
            if self.runs_elsewhere:
                await asyncio.sleep(POLL_SECONDS)  # another replica's run: its end is read from the store

    def _log_queued(self) -> bool:
        """Says once per queued turn that it waits (for operators; the replica tests wait for this line)."""
        logger.info(
            "turn queued behind run %s",
            self.record.active_run_id,
            extra={"category": "run", "tenant": self.tenant, "session_id": self.session_id},
        )
        return True

    async def _settle(self) -> None:
        """A run whose terminal commit has landed is over for hosts (they may have seen its run_finished), but its
        task may still be running its end hooks: wait for it instead of answering SESSION_BUSY."""
        run = self.run
        if run is not None and run.record.status is RunStatus.FINISHED:
            await run.finished.wait()

    def _wake_queue(self) -> None:
        if self.run is None:
            self._queue.wake()

    async def _start(self, turn: TurnRequest, *, fresh: bool = False) -> ActiveRun:
        """Admits a run (lock held): one commit holds the run row, the transcript entries, the user message and
        run_started. With the stop flag set the run ends at once."""
        self.deps.gate.check()
        credential = self.require_credential()
        if self.record.state is not SessionState.IDLE or self.run is not None:
            raise self.busy_error()
        slots = self.deps.run_slots
        # Refused before anything is written or asked (the lease, hooks); released when the run's task ends.
        slot = slots.acquire(self.tenant) if slots is not None else None
        try:
            await self.own_run()
            try:
                return await self._start_owned(turn, credential, fresh=fresh, slot=slot)
            finally:
                self.disown_run()
        except BaseException:
            if slot is not None:
                slot.release()  # a second release is a no-op
            raise

    async def _start_owned(
        self, turn: TurnRequest, credential: Credential, *, fresh: bool, slot: RunSlot | None
    ) -> ActiveRun:
        if not fresh and await self.sync.revalidate_locked() and self.record.state is not SessionState.IDLE:
            raise self.busy_error()  # another replica started a run before this one took the lease
        admission = await prepare_admission(self, turn, credential, self.deps.event_log)
        run = admission.run
        if self.record.stop_requested:
            if slot is not None:
                slot.release()
            await admission.stopped_at_start(self.ledger)
            return run
        self._slot = slot
        # The model request goes out while the admission commits (it only reads the history it is given); the
        # driver emits nothing until `admitted` is set.
        self.run = run
        driver = RunDriver(self, run, first_history=[*self.history, admission.user_message])
        run.task = asyncio.create_task(driver.execute(), name=f"run-{run.run_id}")
        try:
            await admission.commit(self.ledger)
        except BaseException:
            run.admission_failed = True
            run.task.cancel()
            self.run = None
            self._release_slot()
            raise
        run.admitted.set()
        return run

    # ------------------------------------------------------------------ hosted results
    async def wait_until_exposed(self, call_id: str, *, locked: bool = False) -> None:
        """Waits (outside the lock) until a call the running run still holds is exposed by its suspension, here
        or on the replica executing it."""
        while self.runs_elsewhere:
            await asyncio.sleep(POLL_SECONDS)
            # Reads the suspension (or the run's end) once it is committed.
            await (self.sync.revalidate_locked() if locked else self.revalidate())
        while (run := self.run) is not None and run.task is not None and not run.task.done():
            if not any(r.call_id == call_id for r in run.pending()):
                return
            await asyncio.wait([run.task])

    async def submit(self, call_id: str, result: CallResult) -> Resolution:
        """A host's result for a pending hosted call. The credential is resolved before the last result is
        committed, so a missing one leaves the call pending."""
        await self.wait_until_exposed(call_id)
        async with self._lock:
            await self.wait_until_exposed(call_id, locked=True)
            async with self._resolving():
                run = self.run
                last = run is not None and [r.call_id for r in run.waiting()] == [call_id]
                credential = self.require_credential() if last else None
                payload = payload_hash(result)
                return self._resumed(
                    await resolve_hosted(
                        self, run, call_id, result, ResolvedBy.SUBMIT, payload=payload, credential=credential
                    )
                )

    async def resolve_approval(self, call_id: str, answer: ApprovalAnswer) -> Resolution:
        """A person's answer to a call waiting for approval. The credential is resolved before the answer that
        lets the run continue is committed, so a missing one leaves the call waiting."""
        await self.wait_until_exposed(call_id)
        async with self._lock:
            await self.wait_until_exposed(call_id, locked=True)
            async with self._resolving():
                run = self.run
                call = next((r for r in run.round if r.call_id == call_id), None) if run is not None else None
                stays = (
                    answer.decision is not ApprovalDecision.DENY and call is not None and call.kind is CallKind.HOSTED
                )
                last = run is not None and [r.call_id for r in run.waiting()] == [call_id] and not stays
                credential = self.require_credential() if last else None
                return self._resumed(await resolve_approval(self, run, call_id, answer, credential=credential))

    @contextlib.asynccontextmanager
    async def _resolving(self) -> AsyncIterator[None]:
        """Resolving what a suspended run waits on (lock held): under the session's lease, taken before the state
        is read again, so two replicas never resolve or continue the same run at once (SESSION_BUSY while
        another replica holds it). Released afterwards unless the run continues here."""
        await self.own_run()
        try:
            await self.sync.revalidate_locked()
            yield
        finally:
            self.disown_run()

    async def _expire(self, call_id: str) -> None:
        async with self._lock:
            try:
                async with self._resolving():  # another replica's sweeper may have resolved it first
                    await self._expire_owned(call_id)
            except ServiceError:
                logger.exception("could not time out tool call %s", call_id, extra={"category": "tool_result"})

    async def _expire_owned(self, call_id: str) -> None:
        run = self.run
        call = next((r for r in run.pending() if r.call_id == call_id), None) if run is not None else None
        if call is None:
            return
        if call.status is CallStatus.AWAITING_APPROVAL:
            self._resumed(await resolve_approval(self, run, call_id, timeout_answer(call), credential=None))
            return
        result = CallResult(content=(TextPart(text="hosted tool timed out"),), is_error=True)
        self._resumed(await resolve_hosted(self, run, call_id, result, ResolvedBy.TIMEOUT, payload="", credential=None))

    def restore_suspension(self, run: ActiveRun) -> None:
        """A suspended run read back from the store (after a restart or an eviction): its deadlines re-arm,
        and expired ones fire at once."""
        run.admitted.set()
        self.run = run
        self.deadlines.arm(run.pending())

    # ------------------------------------------------------------------ steering and stop
    async def inject(self, parts: tuple[ContentPart, ...], keyed: KeyedRequest | None = None) -> str:
        """Commits a steering message to the active run's queue; "" when the session is idle."""
        async with self._lock:
            if keyed is not None and (replay := await keyed.replay()) is not None:
                return str(replay["run_id"])
            idem = keyed.idem if keyed is not None else None
            relayed = {"kind": "inject", "parts": CONTENT_PARTS.dumps(parts)}
            relayed |= {"request_id": idem.request_id if idem else "", "body_hash": idem.body_hash if idem else ""}
            if (answer := await self._relayed(relayed)) is not None:
                return str(answer["run_id"])
            run_id = await self._inject(parts, keyed)
            if not run_id and keyed is not None:
                await keyed.remember(self.session_id, {"run_id": ""})
            return run_id

    async def _inject(self, parts: tuple[ContentPart, ...], keyed: KeyedRequest | None) -> str:
        run = self.run
        if run is None or self.record.state is SessionState.IDLE:
            return ""

        def enqueue(record: SessionRecord) -> dict[str, object]:
            # Decided in commit order: a run that has committed its end takes no more messages.
            if record.state is SessionState.IDLE or record.active_run_id != run.run_id:
                raise CommitRefused
            return {"pending_injections": (*record.pending_injections, parts)}

        try:
            await self.ledger.commit(
                transcript=[self.ledger.entry(run.run_id, MessageEntry(content=parts, injected=True))],
                derive=enqueue,
                idempotency=keyed.record({"run_id": run.run_id}) if keyed is not None else None,
            )
        except CommitRefused:
            return ""
        return run.run_id

    async def request_stop(self) -> str:
        """Sets the sticky stop flag and stops the active run (executing or suspended)."""
        async with self._lock:
            if (answer := await self._relayed({"kind": "stop"})) is not None:
                return str(answer["run_id"])
            await self._set_stop_flag(True)
            return await self._stop_run(RunReason.STOP_REQUESTED)

    async def clear_stop(self) -> bool:
        async with self._lock:
            if (answer := await self._relayed({"kind": "clear_stop"})) is not None:
                return bool(answer["was_set"])
            return await self._set_stop_flag(False)

    async def stop(self, reason: RunReason, run_id: str = "") -> str:
        """Stops the active run (or the one named) and waits for its terminal run_finished."""
        async with self._lock:
            if (
                answer := await self._relayed({"kind": "cancel", "reason": reason.value, "run_id": run_id})
            ) is not None:
                return str(answer["run_id"])
            return await self._stop_run(reason, run_id)

    async def _set_stop_flag(self, value: bool) -> bool:
        previous = self.record.stop_requested
        if previous != value:
            await self.ledger.commit(stop_requested=value)
        return previous

    def cancel_run(self, reason: RunReason, run_id: str = "") -> str:
        """Stops an executing run once (not sticky); returns its id, or "" when nothing matched. Safe to call
        from a handler that is itself being cancelled: it only flags and cancels the run task. A suspended run
        has no task: `stop` ends it."""
        run = self.run
        if run is None or (run_id and run.run_id != run_id) or run.task is None or run.task.done():
            return ""
        if run.stop_reason is None:
            run.stop_reason = reason
            run.task.cancel()
        return run.run_id

    async def _stop_run(self, reason: RunReason, run_id: str = "") -> str:
        run = self.run
        if run is None or (run_id and run.run_id != run_id):
            return ""
        if run.task is not None and not run.task.done():
            self.cancel_run(reason)
            await run.finished.wait()
            return run.run_id
        if self.record.state is SessionState.SUSPENDED:
            run.stop_reason = reason
            self.deadlines.disarm()
            await RunDriver(self, run).close_suspended(reason)
        return run.run_id

    # ------------------------------------------------------------------ session-level commands
    async def reset(self, reason: str, keyed: KeyedRequest) -> SessionRecord:
        """Stops any run (SESSION_RESET), fires before_reset, then clears history, pending calls, usage snapshot
        and stop flag; numbering, config and checkpoints stay."""
        async with self._lock:
            if await keyed.replay() is not None:
                return self.record
            await self._stop_run(RunReason.SESSION_RESET)
            await self.tools.close_mcp()  # they start again at the next run
            await self.hooks.fire_and_wait(
                "before_reset",
                {
                    "sessionFile": self.session_file,
                    "messages": MessageHistory(tuple(m.api_message() for m in self.history)),
                    "reason": reason,
                },
            )
            event = self.ledger.stamp("", SessionResetEvent(reason=reason))
            await self.ledger.commit(
                events=[event],
                transcript=[self.ledger.entry("", SessionResetEntry(reason=reason), event.sequence)],
                history=[],
                replace_history=True,
                pending_call_ids=(),
                pending_injections=(),
                usage_snapshot=None,
                last_compaction_time=None,
                approved_tools=(),
                stop_requested=False,
                state=SessionState.IDLE,
                active_run_id="",
                idempotency=keyed.record({"session_id": self.session_id}),
            )
            return self.record

    async def change(
        self, derive: Callable[[SessionRecord], dict[str, object]], keyed: KeyedRequest, answer: dict[str, object]
    ) -> SessionRecord:
        """Applies a change of the session record (overrides, identity) decided from its current state; an
        empty change stores only the request's key."""
        async with self._lock:
            if await keyed.replay() is not None:
                return self.record
            changes = derive(self.record)
            if changes:
                await self.ledger.commit(idempotency=keyed.record(dict(answer)), derive=lambda _: changes)
            else:
                await keyed.remember(self.session_id, dict(answer))
            return self.record

    async def compact(
        self,
        reason: CompactionReason,
        keyed: KeyedRequest,
        *,
        instructions: str = "",
        due: Callable[[SessionRecord], bool] | None = None,
    ) -> CompactionOutcome:
        """Compacts an idle session's history (RequestCompaction, MaybeCompactByTokens); `due` decides from the
        session's state whether it is time (a no-op result otherwise). The summary is written under the command
        lock, so a turn arriving meanwhile waits for it."""
        async with self._lock:
            if (replay := await keyed.replay()) is not None:
                return outcome_from_json(replay)
            await self._settle()
            if self.run is not None or self.record.state is not SessionState.IDLE:
                raise self.busy_error()
            if due is not None and not due(self.record):
                count = len(self.history)
                outcome = CompactionOutcome(reason=reason, compacted=False, messages_before=count, messages_after=count)
            else:
                model_ref = self.record.config.model_ref or self.settings.default_model
                compactor = Compactor(self, run_id="", model_ref=model_ref, credential=self.require_credential())
                outcome = await compactor.compact(reason, instructions)
            await keyed.remember(self.session_id, outcome_to_json(outcome))
            return outcome

    async def when_idle(self, work: Callable[[], Awaitable[T]]) -> T:
        """Runs `work` with no run active and no command applying meanwhile (a checkpoint restore)."""
        async with self._lock:
            await self._settle()
            if self.run is not None or self.record.state is not SessionState.IDLE:
                raise self.busy_error()
            return await work()

    async def quiesced(self, work: Callable[[], Awaitable[T]]) -> T:
        """Runs `work` with no command applying meanwhile (a consistent read for a fork)."""
        async with self._lock:
            return await work()

    async def close(self, reason: RunReason) -> None:
        """The session is deleted: its run stops, its deadlines disarm and its streams end."""
        async with self._lock:
            await self._stop_run(reason)
            self.deadlines.disarm()
            self.ledger.close_subscribers()
        await self.tools.close_mcp()
        await self.end_session_hooks(wait=False, deleted=True)

    async def end_session_hooks(self, *, wait: bool, deleted: bool = False) -> None:
        """session_end: when the session object ends after session_start fired in this process, so the two pair
        up, and always when the session is deleted (docs/hooks.md)."""
        if not self.hooks.session_started and not deleted:
            return
        await self.hooks.session_end(await self.store.count_transcript(self.tenant, self.session_id), wait=wait)
