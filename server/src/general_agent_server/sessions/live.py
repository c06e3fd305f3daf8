"""A loaded session: the one owner of its mutable state and of its run (docs/architecture.md).

Concurrency guarantees:
- Commands (admit a turn, resolve a hosted call, inject, stop, clear the stop flag, cancel, reset, overrides,
  restore, fork reads) are applied one at a time under the session's command lock, which only this class takes.
  Each command decides from the state the previous one left: the busy policies, the idempotency keys and the
  pending calls are checked and changed atomically. What a command does lives in its part, each a set of
  functions that take the session as a `CommandedSession` (sessions/loaded.py) and run with the lock held:
  admitting turns (sessions/turn_admission.py), answering hosted calls and approvals (sessions/hosted_answers.py),
  steering and stopping the run (sessions/steering.py), and the session-level commands
  (sessions/session_commands.py). This class owns the lock, the run, its run slot and the turn queue; the parts
  change the run only through `run` and the slot methods.
- A run executes as a task this object owns, so a handler cancelled by its client never interrupts a commit or
  a run (the run follows on_disconnect). While the task is alive only its driver changes the run; while the run
  is suspended (no task) only commands do.
- The driver's first model request goes out while the admission commits; it emits nothing until `admitted` is
  set (the commit has landed), and a failed admission cancels it before anything was emitted.
- A submit that arrives before the suspension commit (the host may know the call id from tool_call while the
  round's local tools still run) waits outside the lock until the run has suspended or ended, then applies.
- An ENQUEUE turn waits in the turn queue outside the lock, and tries again under it once the session is idle.
- The durable state (record, history), the sequencer, commits and subscribers belong to the session's
  `SessionLedger` (sessions/ledger.py), which states its own guarantees."""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import CompactionReason, RunReason
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import CallResult
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.hooks.session_hooks import SessionHooks
from general_agent_server.mcp_servers.servers import SessionServers
from general_agent_server.model.history_encoding import HistoryEncoding
from general_agent_server.model.port import Credential, ModelClient
from general_agent_server.runs.approvals import ApprovalAnswer
from general_agent_server.runs.compaction import CompactionOutcome
from general_agent_server.runs.deadlines import Deadlines
from general_agent_server.runs.state import ActiveRun, Admission, BusyPolicy, Resolution, TurnRequest
from general_agent_server.runs.turn_queue import TurnQueue
from general_agent_server.sessions import hosted_answers, session_commands, steering, turn_admission
from general_agent_server.sessions.deps import SessionDeps
from general_agent_server.sessions.idempotency import KeyedRequest
from general_agent_server.sessions.ledger import LedgerSettings, SessionLedger
from general_agent_server.sessions.relay import POLL_SECONDS
from general_agent_server.sessions.replica_sync import ReplicaSync
from general_agent_server.sessions.session_tools import SessionTools
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.sessions.subscribers import Subscriber
from general_agent_server.store.port import SessionStore
from general_agent_server.tenants.slots import RunSlot
from general_agent_server.tools.runtime import ToolContext, ToolSet, ToolSpec

logger = logging.getLogger(__name__)
_SESSION_END = frozenset({"session_end"})

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
                lease_ttl_seconds=settings.lease_ttl_seconds,
                subscriber_buffer=settings.subscriber_buffer,
                event_retention_count=settings.event_retention_count,
                event_retention_seconds=settings.event_retention_seconds,
            ),
        )
        self.hooks = SessionHooks(self.ledger, self.workspace, deps.hooks)
        self.history_encoding = HistoryEncoding()
        self.ledger.transcript_filter = self.hooks.filter_transcript
        self._lock = asyncio.Lock()
        self.run: ActiveRun | None = None
        # Handlers and streams using the session now; the cache never evicts a session in use.
        self.users = 0
        self.on_idle: Callable[[LiveSession], None] = lambda session: None
        self._queue = TurnQueue(record.session_id)
        self.tools = SessionTools(self)
        self.sync = ReplicaSync(self, self._lock)
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

    @functools.cached_property
    def workspace(self) -> Path:
        """Computed once: the settings, the tenant and the id of a loaded session never change (tools ask for
        it on every turn)."""
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

    async def own_run(self) -> int | None:
        return await self.sync.own_run()

    def disown_run(self) -> None:
        self.sync.disown_run()

    async def revalidate(self) -> bool:
        return await self.sync.revalidate()

    async def restore_stored_suspension(self) -> None:
        await self.sync.restore_stored_suspension()

    @property
    def live_point(self) -> int:
        """The newest sequence a live-only stream starts after: what this copy numbered, or, while another
        replica's run numbers the session, what the store had committed when the copy was read (the copy's
        counter then sits at the end of the reserved block)."""
        return self.record.last_sequence if self.runs_elsewhere else self.ledger.last_assigned_sequence

    def subscribe(self, *, follow_remote: bool = True) -> Subscriber:
        """A subscriber to the session's events; with `follow_remote`, another replica's runs reach it too
        (sessions/remote_tail.py). A stream that will follow a run started here needs only this replica's events,
        and asks for the tail (`follow_remote`) only if it ends up following a run elsewhere."""
        subscriber = self.ledger.subscribe()
        if follow_remote:
            self.follow_remote()
        return subscriber

    def follow_remote(self) -> None:
        """Another replica's runs of the session reach its subscribers here until the last one leaves."""
        self.deps.tails.follow(self)

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
        self.release_slot()
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

    def hold_slot(self, slot: RunSlot | None) -> None:
        self._slot = slot

    def release_slot(self) -> None:
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    def resumed(self, resolution: Resolution) -> Resolution:
        """A suspended run its host's answer continued holds a slot again (never refused: it was admitted)."""
        run = resolution.continued
        slots = self.deps.run_slots
        if run is not None and run.task is not None and slots is not None and self._slot is None:
            self._slot = slots.take(self.tenant)
        return resolution

    # ------------------------------------------------------------------ commands (each under the command lock)
    async def admit(self, turn: TurnRequest, policy: BusyPolicy) -> Admission:
        """Starts a run, or applies the busy policy (sessions/turn_admission.py)."""
        if policy is BusyPolicy.ENQUEUE:
            return await self._admit_queued(turn)
        async with self._lock:
            return await turn_admission.admit(self, turn, policy)

    async def _admit_queued(self, turn: TurnRequest) -> Admission:
        """An ENQUEUE turn waits in the turn queue, outside the lock, until the session is idle."""
        settings = self.settings
        waited = False
        while True:
            if not waited and (self.run is not None or self.record.state is not SessionState.IDLE):
                waited = turn_admission.log_queued(self)
            await self._queue.wait(
                idle=lambda: self.run is None,
                record=lambda: self.record,
                max_queued=settings.max_queued_turns,
                timeout=settings.enqueue_timeout,
            )
            try:
                async with self._lock:
                    if (admission := await turn_admission.admit_queued(self, turn, waited=waited)) is not None:
                        return admission
                    waited = True
            finally:
                self._wake_queue()
            if self.runs_elsewhere:
                await asyncio.sleep(POLL_SECONDS)  # another replica's run: its end is read from the store

    def _wake_queue(self) -> None:
        if self.run is None:
            self._queue.wake()

    async def submit(self, call_id: str, result: CallResult) -> Resolution:
        """A host's result for a pending hosted call (sessions/hosted_answers.py)."""
        await hosted_answers.wait_until_exposed(self, call_id)
        async with self._lock:
            return await hosted_answers.submit(self, call_id, result)

    async def resolve_approval(self, call_id: str, answer: ApprovalAnswer) -> Resolution:
        """A person's answer to a call waiting for approval (sessions/hosted_answers.py)."""
        await hosted_answers.wait_until_exposed(self, call_id)
        async with self._lock:
            return await hosted_answers.approve(self, call_id, answer)

    async def _expire(self, call_id: str) -> None:
        async with self._lock:
            await hosted_answers.expire(self, call_id)

    def restore_suspension(self, run: ActiveRun) -> None:
        """A suspended run read back from the store (after a restart or an eviction): its deadlines re-arm,
        and expired ones fire at once."""
        run.admitted.set()
        self.run = run
        self.deadlines.arm(run.pending())

    async def inject(self, parts: tuple[ContentPart, ...], keyed: KeyedRequest | None = None) -> str:
        """Commits a steering message to the active run's queue; "" when the session is idle."""
        async with self._lock:
            return await steering.inject(self, parts, keyed)

    async def request_stop(self) -> str:
        """Sets the sticky stop flag and stops the active run (executing or suspended)."""
        async with self._lock:
            return await steering.request_stop(self)

    async def clear_stop(self) -> bool:
        async with self._lock:
            return await steering.clear_stop(self)

    async def stop(self, reason: RunReason, run_id: str = "") -> str:
        """Stops the active run (or the one named) and waits for its terminal run_finished."""
        async with self._lock:
            return await steering.stop(self, reason, run_id)

    def cancel_run(self, reason: RunReason, run_id: str = "") -> str:
        """Stops an executing run once (not sticky), without the lock (sessions/steering.py)."""
        return steering.cancel_run(self, reason, run_id)

    async def reset(self, reason: str, keyed: KeyedRequest) -> SessionRecord:
        """Stops any run and clears the session's history (sessions/session_commands.py)."""
        async with self._lock:
            return await session_commands.reset(self, reason, keyed)

    async def change(
        self, derive: Callable[[SessionRecord], dict[str, object]], keyed: KeyedRequest, answer: dict[str, object]
    ) -> SessionRecord:
        """Applies a change of the session record (overrides, identity) decided from its current state."""
        async with self._lock:
            return await session_commands.change(self, derive, keyed, answer)

    async def compact(
        self,
        reason: CompactionReason,
        keyed: KeyedRequest,
        *,
        instructions: str = "",
        due: Callable[[SessionRecord], bool] | None = None,
    ) -> CompactionOutcome:
        """Compacts an idle session's history (RequestCompaction, MaybeCompactByTokens)."""
        async with self._lock:
            return await session_commands.compact(self, reason, keyed, instructions=instructions, due=due)

    async def when_idle(self, work: Callable[[], Awaitable[T]]) -> T:
        """Runs `work` with no run active and no command applying meanwhile (a checkpoint restore)."""
        async with self._lock:
            await turn_admission.settle(self)
            if self.run is not None or self.record.state is not SessionState.IDLE:
                raise turn_admission.busy_error(self)
            return await work()

    async def quiesced(self, work: Callable[[], Awaitable[T]]) -> T:
        """Runs `work` with no command applying meanwhile (a consistent read for a fork)."""
        async with self._lock:
            return await work()

    async def close(self, reason: RunReason) -> None:
        """The session is deleted: its run stops, its deadlines disarm and its streams end."""
        async with self._lock:
            await steering.stop_run(self, reason)
            self.deadlines.disarm()
            self.ledger.close_subscribers()
        await self.tools.close_mcp()
        await self.end_session_hooks(wait=False, deleted=True)

    async def end_session_hooks(self, *, wait: bool, deleted: bool = False) -> None:
        """session_end: when the session object ends after session_start fired in this process, so the two pair
        up, and always when the session is deleted (docs/hooks.md)."""
        if not self.hooks.session_started and not deleted:
            return
        if not self.hooks.wants(_SESSION_END):
            # Nothing listens: no transcript count read for every evicted session (or every loaded one at shutdown).
            self.hooks.session_started = False
            return
        await self.hooks.session_end(await self.store.count_transcript(self.tenant, self.session_id), wait=wait)
