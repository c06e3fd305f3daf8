"""Turns and their streams: StreamTurn with the busy policies of Appendix C, hosted-tool submits, steering,
stop/cancel, and the replay-then-live event streams shared by WatchSession, RunSession and idempotent
retries."""

from __future__ import annotations

import enum
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import MessageInjected, RunFinished, RunReason, RunTrigger, SequencedEvent
from general_agent_server.domain.records import CallResult, ResolvedBy, RunRecord
from general_agent_server.domain.session import SessionState
from general_agent_server.domain.validation import check_sequence, check_session_id, check_token, check_turn_input
from general_agent_server.model.port import Credential
from general_agent_server.sessions.idempotency import request_id_reused
from general_agent_server.sessions.live import ActiveRun, Resolution, SessionActor, TurnRequest, payload_hash

if TYPE_CHECKING:
    from general_agent_server.sessions.idempotency import Idempotency
    from general_agent_server.sessions.service import AgentCore, CallContext


class BusyPolicy(enum.Enum):
    REJECT = "REJECT"
    ENQUEUE = "ENQUEUE"
    INTERRUPT = "INTERRUPT"
    STEER = "STEER"


class OnDisconnect(enum.Enum):
    CANCEL = "CANCEL"
    CONTINUE = "CONTINUE"


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnOptions:
    busy_policy: BusyPolicy = BusyPolicy.REJECT
    on_disconnect: OnDisconnect = OnDisconnect.CANCEL


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """How a turn entered the session: a run it started, or the run it steered."""

    run: ActiveRun | None
    steered_run_id: str = ""


def no_api_key(session_id: str, why: str) -> ServiceError:
    return ServiceError(ErrorCode.FAILED_PRECONDITION, "NO_API_KEY", why, metadata={"session_id": session_id})


class TurnOps:
    """See module docstring."""

    def __init__(self, core: AgentCore) -> None:
        self._core = core
        self._settings = core.settings
        self._store = core.store
        self._registry = core.registry

    # ------------------------------------------------------------------ admission
    def credential(self, actor: SessionActor) -> Credential:
        credential = self._core.resolve_credential(actor)
        if credential is None:
            why = self._core.credentials.why_none(
                tenant=actor.tenant, session_profile_id=actor.record.config.auth_profile_id
            )
            raise no_api_key(actor.session_id, why)
        return credential

    def check_input(self, parts: tuple[ContentPart, ...], field_path: str = "input") -> None:
        check_turn_input(
            parts,
            field_path=field_path,
            max_image_bytes=self._settings.max_image_bytes,
            max_message_bytes=self._settings.max_message_bytes,
        )

    async def admit(
        self,
        actor: SessionActor,
        parts: tuple[ContentPart, ...],
        policy: BusyPolicy,
        idem: Idempotency | None,
    ) -> Admission:
        """Starts a run, or applies the busy policy (Appendix C). The stop flag is checked after the
        policy: a run started while it is set ends stop_requested."""
        trigger = RunTrigger.STEER if policy is BusyPolicy.STEER else RunTrigger.TURN
        if policy is BusyPolicy.ENQUEUE:
            waited = False
            while True:
                if actor.run is not None or actor.record.state is not SessionState.IDLE:
                    waited = True
                await actor.wait_turn(
                    max_queued=self._settings.max_queued_turns, timeout=self._settings.enqueue_timeout_seconds
                )
                try:
                    async with actor.lock:
                        if actor.record.state is SessionState.IDLE and actor.run is None:
                            run = await self._start(
                                actor, parts, idem, RunTrigger.ENQUEUED_TURN if waited else RunTrigger.TURN
                            )
                            return Admission(run=run)
                        waited = True
                finally:
                    actor.queue_done()
        async with actor.lock:
            self._core.check_serving()
            if actor.record.state is not SessionState.IDLE:
                if policy is BusyPolicy.REJECT:
                    raise actor.busy_error()
                if policy is BusyPolicy.STEER:
                    return Admission(run=None, steered_run_id=await actor.inject(parts))
                await actor.stop_run(RunReason.SUPERSEDED)
            return Admission(run=await self._start(actor, parts, idem, trigger))

    async def _start(
        self, actor: SessionActor, parts: tuple[ContentPart, ...], idem: Idempotency | None, trigger: RunTrigger
    ) -> ActiveRun:
        self._core.check_serving()
        credential = self.credential(actor)
        return await actor.start_turn(
            TurnRequest(
                parts=parts,
                request_id=idem.request_id if idem else "",
                body_hash=idem.body_hash if idem else "",
                trigger=trigger,
            ),
            model_ref=actor.record.config.model_ref or self._settings.default_model_ref,
            credential=credential,
            run_id=str(uuid.uuid4()),
        )

    # ------------------------------------------------------------------ StreamTurn
    async def stream_turn(
        self,
        ctx: CallContext,
        session_id: str,
        parts: tuple[ContentPart, ...],
        *,
        options: TurnOptions,
        idem: Idempotency | None = None,
    ) -> AsyncIterator[SequencedEvent]:
        """Yields the run's events until its first run_finished (terminal or SUSPENDED). A replayed
        request_id attaches to the original run; a STEER turn follows the run it steered until the next
        run_finished after its message was delivered."""
        check_session_id(session_id)
        self.check_input(parts)
        self._core.check_serving()
        async with self._registry.use(ctx.tenant, session_id) as actor:
            if idem is not None and idem.request_id:
                previous = await self._store.find_run_by_request_id(ctx.tenant, session_id, idem.request_id)
                if previous is not None:
                    async for event in self._replay_run(actor, previous, idem):
                        yield event
                    return
            subscriber = actor.subscribe()
            run: ActiveRun | None = None
            delivered_end = False
            try:
                admission = await self.admit(actor, parts, options.busy_policy, idem)
                run = admission.run
                followed = run.run_id if run is not None else admission.steered_run_id
                if not followed:
                    return
                injected = run is not None
                while (live := await subscriber.get()) is not None:
                    if live.run_id != followed:
                        continue
                    yield live
                    if isinstance(live.body, MessageInjected):
                        injected = True
                    if isinstance(live.body, RunFinished) and (injected or live.body.terminal):
                        delivered_end = True
                        return
            finally:
                actor.unsubscribe(subscriber)
                if run is not None and not delivered_end and options.on_disconnect is OnDisconnect.CANCEL:
                    actor.cancel_run(RunReason.CANCELLED, run.run_id)

    async def _replay_run(
        self, actor: SessionActor, run: RunRecord, idem: Idempotency
    ) -> AsyncIterator[SequencedEvent]:
        if run.body_hash != idem.body_hash:
            raise request_id_reused(idem.request_id, run_id=run.run_id)
        async for event in self.events_after(actor, run.first_sequence - 1):
            if event.run_id != run.run_id:
                continue
            yield event
            if isinstance(event.body, RunFinished):
                return

    # ------------------------------------------------------------------ hosted results
    async def submit(
        self,
        ctx: CallContext,
        session_id: str,
        call_id: str,
        result: CallResult,
        *,
        on_disconnect: OnDisconnect = OnDisconnect.CANCEL,
    ) -> AsyncIterator[SequencedEvent]:
        """Resolves one pending hosted call; yields its tool_result/tool_error and what follows up to the
        next run_finished. An identical retry replays that submit's events from the log."""
        check_session_id(session_id)
        check_token("call_id", call_id, required=True)
        self._core.check_serving()
        async with self._registry.use(ctx.tenant, session_id) as actor:
            subscriber = actor.subscribe()
            continued: ActiveRun | None = None
            delivered_end = False
            try:
                # Waiting for the suspension happens outside the lock, so a stop is not held up meanwhile.
                await actor.wait_until_exposed(call_id)
                async with actor.lock:
                    resolution, continued = await self.resolve(actor, call_id, result)
                if resolution.replay:
                    actor.unsubscribe(subscriber)
                    async for event in self._events_from(actor, resolution.sequence):
                        yield event
                    return
                while (live := await subscriber.get()) is not None:
                    if live.sequence < resolution.sequence:
                        continue
                    yield live
                    if isinstance(live.body, RunFinished):
                        delivered_end = True
                        return
            finally:
                actor.unsubscribe(subscriber)
                if continued is not None and not delivered_end and on_disconnect is OnDisconnect.CANCEL:
                    actor.cancel_run(RunReason.CANCELLED, continued.run_id)

    async def resolve(
        self, actor: SessionActor, call_id: str, result: CallResult
    ) -> tuple[Resolution, ActiveRun | None]:
        """Lock held. The credential is resolved before the last result is committed, so a missing one
        leaves the call pending. A submit that arrives before the suspension commit waits for it (spec 6)."""
        await actor.wait_until_exposed(call_id)
        last = [r.call_id for r in actor.round if r.status.value == "PENDING"] == [call_id]
        credential = self.credential(actor) if last else None
        resolution = await actor.resolve_hosted(
            call_id, result, ResolvedBy.SUBMIT, payload=payload_hash(result), credential=credential
        )
        continued = actor.run if last and not resolution.replay else None
        return resolution, continued

    async def _events_from(self, actor: SessionActor, first_sequence: int) -> AsyncIterator[SequencedEvent]:
        async for event in self.events_after(actor, first_sequence - 1):
            yield event
            if isinstance(event.body, RunFinished):
                return

    # ------------------------------------------------------------------ steering and stop
    async def inject(
        self, ctx: CallContext, session_id: str, parts: tuple[ContentPart, ...], idem: Idempotency | None = None
    ) -> str:
        check_session_id(session_id)
        self.check_input(parts)
        keys = self._core.idempotency
        async with self._registry.use(ctx.tenant, session_id) as actor, actor.lock:
            replay = await keys.replay(ctx.tenant, "InjectMessage", idem)
            if replay is not None:
                return str(replay["run_id"])
            active = actor.run.run_id if actor.run is not None else ""
            run_id = await actor.inject(parts, keys.record(ctx.tenant, "InjectMessage", idem, {"run_id": active}))
            if not run_id:
                await keys.remember(ctx.tenant, session_id, "InjectMessage", idem, {"run_id": ""})
            return run_id

    async def request_stop(self, ctx: CallContext, session_id: str) -> str:
        """Sets the sticky stop flag and stops the active run (executing or suspended)."""
        check_session_id(session_id)
        async with self._registry.use(ctx.tenant, session_id) as actor, actor.lock:
            await actor.set_stop_flag(True)
            return await actor.stop_run(RunReason.STOP_REQUESTED)

    async def clear_stop(self, ctx: CallContext, session_id: str) -> bool:
        check_session_id(session_id)
        async with self._registry.use(ctx.tenant, session_id) as actor, actor.lock:
            return await actor.set_stop_flag(False)

    async def cancel_run(self, ctx: CallContext, session_id: str, run_id: str) -> str:
        check_session_id(session_id)
        async with self._registry.use(ctx.tenant, session_id) as actor, actor.lock:
            return await actor.stop_run(RunReason.CANCELLED, run_id)

    # ------------------------------------------------------------------ watching
    async def watch(
        self, ctx: CallContext, session_id: str, after_sequence: int | None
    ) -> AsyncIterator[SequencedEvent]:
        check_session_id(session_id)
        check_sequence(after_sequence, "after_sequence")
        self._core.check_serving()
        async with self._registry.use(ctx.tenant, session_id) as actor:
            async for event in self.events_after(actor, after_sequence):
                yield event

    async def events_after(
        self,
        actor: SessionActor,
        after_sequence: int | None,
        *,
        on_subscribed: Callable[[], None] | None = None,
    ) -> AsyncIterator[SequencedEvent]:
        """Live subscription first, then the durable log up to the live point, then live events not
        already replayed: no gap, no duplicate (spec 5.6)."""
        subscriber = actor.subscribe()
        if on_subscribed is not None:
            on_subscribed()
        try:
            last = actor.last_assigned_sequence if after_sequence is None else after_sequence
            if after_sequence is not None:
                oldest = await self._store.oldest_event_sequence(actor.tenant, actor.session_id)
                if oldest is not None and after_sequence < oldest - 1 and oldest > 1:
                    raise ServiceError(
                        ErrorCode.OUT_OF_RANGE,
                        "EVENTS_EXPIRED",
                        f"events after {after_sequence} are no longer retained; the oldest is {oldest}",
                        metadata={"oldest_sequence": str(oldest)},
                    )
                await self._store.flush()
                while True:
                    batch = await self._store.read_events(
                        actor.tenant,
                        actor.session_id,
                        after_sequence=last,
                        limit=self._settings.event_replay_batch,
                    )
                    if not batch:
                        break
                    for event in batch:
                        yield event
                        last = event.sequence
            while (live := await subscriber.get()) is not None:
                if live.sequence <= last:
                    continue
                last = live.sequence
                yield live
        finally:
            actor.unsubscribe(subscriber)
            self._registry.release_idle(actor)
