"""The one handler of run commands, whatever the transport: StreamTurn and the unary run RPCs call it with a
session id, RunSession attachments (runs/attachment.py) with the session they are attached to. Validation,
idempotent replays, what a stream follows and when it ends, and on_disconnect live here; the rules that need
the session's state (busy policies, pending calls, the stop flag) are applied by the live session under its
command lock (sessions/live.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.context import CallContext
from general_agent_server.domain.events import MessageInjected, RunFinished, RunReason, SequencedEvent
from general_agent_server.domain.records import CallResult, RunRecord
from general_agent_server.domain.validation import check_sequence, check_session_id, check_token, check_turn_input
from general_agent_server.runs.approvals import ApprovalAnswer
from general_agent_server.runs.state import (
    ActiveRun,
    Admission,
    BusyPolicy,
    OnDisconnect,
    Resolution,
    TurnOptions,
    TurnRequest,
)
from general_agent_server.runs.streams import EventStreams
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.idempotency import Idempotency, IdempotencyKeys, request_id_reused
from general_agent_server.sessions.live import LiveSession
from general_agent_server.sessions.serving import ServingGate
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore


def _revalidates(options: TurnOptions, idem: Idempotency | None) -> bool:
    """Whether a turn needs its cached copy checked against the store before admission. A REJECT or INTERRUPT
    turn decides nothing before admission takes the lease and reads the session again; a STEER or ENQUEUE
    turn picks its path from the state first, and a replayed request_id follows a run wherever it executes."""
    replayable = idem is not None and bool(idem.request_id)
    return replayable or options.busy_policy not in (BusyPolicy.REJECT, BusyPolicy.INTERRUPT)


class RunControl:
    def __init__(
        self,
        *,
        cache: SessionCache,
        store: SessionStore,
        settings: CoreSettings,
        gate: ServingGate,
        keys: IdempotencyKeys,
        streams: EventStreams,
    ) -> None:
        self._cache = cache
        self._store = store
        self._settings = settings
        self._gate = gate
        self._keys = keys
        self.streams = streams

    def check_input(self, parts: tuple[ContentPart, ...], field_path: str = "input") -> None:
        check_turn_input(
            parts,
            field_path=field_path,
            max_image_bytes=self._settings.max_image_bytes,
            max_message_bytes=self._settings.max_message_bytes,
        )

    # ------------------------------------------------------------------ commands on an attached session
    async def admit(
        self,
        session: LiveSession,
        parts: tuple[ContentPart, ...],
        options: TurnOptions,
        idem: Idempotency | None,
        field_path: str = "input",
    ) -> Admission:
        self.check_input(parts, field_path)
        turn = TurnRequest(
            parts=parts, request_id=idem.request_id if idem else "", body_hash=idem.body_hash if idem else ""
        )
        return await session.admit(turn, options.busy_policy)

    async def resolve(self, session: LiveSession, call_id: str, result: CallResult) -> Resolution:
        check_token("call_id", call_id, required=True)
        return await session.submit(call_id, result)

    async def answer(self, session: LiveSession, call_id: str, answer: ApprovalAnswer) -> Resolution:
        check_token("call_id", call_id, required=True)
        return await session.resolve_approval(call_id, answer)

    async def inject_into(
        self,
        session: LiveSession,
        ctx: CallContext,
        parts: tuple[ContentPart, ...],
        idem: Idempotency | None = None,
        field_path: str = "input",
    ) -> str:
        self.check_input(parts, field_path)
        return await session.inject(parts, self._keys.keyed(ctx.tenant, "InjectMessage", idem))

    # ------------------------------------------------------------------ StreamTurn
    def stream_turn(
        self,
        ctx: CallContext,
        session_id: str,
        parts: tuple[ContentPart, ...],
        *,
        options: TurnOptions,
        idem: Idempotency | None = None,
    ) -> AsyncIterator[SequencedEvent]:
        """The run's events until its first run_finished (terminal or SUSPENDED). A replayed request_id attaches
        to the original run; a STEER turn follows the run it steered until the next run_finished after its
        message was delivered. Nothing is checked or started until the stream is first read."""
        return self._turn_events(ctx, session_id, parts, options, idem)

    async def _turn_events(
        self,
        ctx: CallContext,
        session_id: str,
        parts: tuple[ContentPart, ...],
        options: TurnOptions,
        idem: Idempotency | None,
    ) -> AsyncIterator[SequencedEvent]:
        # One generator from the session's subscriber to the transport: every layer is a hop per event.
        check_session_id(session_id)
        self.check_input(parts)
        self._gate.check()
        async with self._cache.use(ctx.tenant, session_id, revalidate=_revalidates(options, idem)) as session:
            previous = await self._replayed_run(ctx.tenant, session_id, idem)
            if previous is not None:
                async for event in self.streams.run_from(session, previous.first_sequence, previous.run_id):
                    yield event
                return
            # A run admitted here publishes every event of its own; a STEER turn may follow a run elsewhere.
            subscriber = session.subscribe(follow_remote=False)
            run: ActiveRun | None = None
            delivered_end = False
            try:
                admission = await self.admit(session, parts, options, idem)
                run = admission.run
                followed = run.run_id if run is not None else admission.steered_run_id
                if not followed:
                    return
                if run is None:
                    session.follow_remote()
                injected = run is not None
                while (live := await subscriber.get()) is not None:
                    if live.run_id != followed:
                        continue
                    yield live
                    injected = injected or isinstance(live.body, MessageInjected)
                    if isinstance(live.body, RunFinished) and (injected or live.body.terminal):
                        delivered_end = True
                        return
            finally:
                session.unsubscribe(subscriber)
                if run is not None and not delivered_end and options.on_disconnect is OnDisconnect.CANCEL:
                    session.cancel_run(RunReason.CANCELLED, run.run_id)

    async def _replayed_run(self, tenant: str, session_id: str, idem: Idempotency | None) -> RunRecord | None:
        """The run a repeated request_id started, or None for a new request; REQUEST_ID_REUSED when the repeat's
        body differs."""
        if idem is None or not idem.request_id:
            return None
        previous = await self._store.find_run_by_request_id(tenant, session_id, idem.request_id)
        if previous is not None and previous.body_hash != idem.body_hash:
            raise request_id_reused(idem.request_id, run_id=previous.run_id)
        return previous

    # ------------------------------------------------------------------ SubmitHostedToolResult, ResolveApproval
    async def submit(
        self,
        ctx: CallContext,
        session_id: str,
        call_id: str,
        result: CallResult,
        *,
        on_disconnect: OnDisconnect = OnDisconnect.CANCEL,
    ) -> AsyncIterator[SequencedEvent]:
        """Resolves one pending hosted call; yields its tool_result/tool_error and what follows up to the next
        run_finished. An identical retry replays that submit's events from the log."""
        check_session_id(session_id)
        check_token("call_id", call_id, required=True)
        async for event in self._resolution(ctx, session_id, lambda s: self.resolve(s, call_id, result), on_disconnect):
            yield event

    async def resolve_approval(
        self,
        ctx: CallContext,
        session_id: str,
        call_id: str,
        answer: ApprovalAnswer,
        *,
        on_disconnect: OnDisconnect = OnDisconnect.CANCEL,
    ) -> AsyncIterator[SequencedEvent]:
        """Answers one call's approval; yields approval_resolved and what follows up to the next run_finished. An
        identical retry replays that answer's events from the log."""
        check_session_id(session_id)
        check_token("call_id", call_id, required=True)
        async for event in self._resolution(ctx, session_id, lambda s: self.answer(s, call_id, answer), on_disconnect):
            yield event

    async def _resolution(
        self,
        ctx: CallContext,
        session_id: str,
        resolve: Callable[[LiveSession], Awaitable[Resolution]],
        on_disconnect: OnDisconnect,
    ) -> AsyncIterator[SequencedEvent]:
        self._gate.check()
        async with self._cache.use(ctx.tenant, session_id) as session:
            subscriber = session.subscribe()
            continued: ActiveRun | None = None
            delivered_end = False
            try:
                resolution = await resolve(session)
                continued = resolution.continued
                if resolution.replay:
                    session.unsubscribe(subscriber)
                    async for event in self.streams.run_from(session, resolution.sequence):
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
                session.unsubscribe(subscriber)
                if continued is not None and not delivered_end and on_disconnect is OnDisconnect.CANCEL:
                    session.cancel_run(RunReason.CANCELLED, continued.run_id)

    # ------------------------------------------------------------------ unary commands
    async def inject(
        self, ctx: CallContext, session_id: str, parts: tuple[ContentPart, ...], idem: Idempotency | None = None
    ) -> str:
        check_session_id(session_id)
        self.check_input(parts)
        async with self._cache.use(ctx.tenant, session_id) as session:
            return await self.inject_into(session, ctx, parts, idem)

    async def request_stop(self, ctx: CallContext, session_id: str) -> str:
        check_session_id(session_id)
        async with self._cache.use(ctx.tenant, session_id) as session:
            return await session.request_stop()

    async def clear_stop(self, ctx: CallContext, session_id: str) -> bool:
        check_session_id(session_id)
        async with self._cache.use(ctx.tenant, session_id) as session:
            return await session.clear_stop()

    async def cancel_run(self, ctx: CallContext, session_id: str, run_id: str) -> str:
        check_session_id(session_id)
        async with self._cache.use(ctx.tenant, session_id) as session:
            return await session.stop(RunReason.CANCELLED, run_id)

    # ------------------------------------------------------------------ WatchSession
    async def watch(
        self, ctx: CallContext, session_id: str, after_sequence: int | None
    ) -> AsyncIterator[SequencedEvent]:
        check_session_id(session_id)
        check_sequence(after_sequence, "after_sequence")
        self._gate.check()
        async with self._cache.use(ctx.tenant, session_id) as session:
            async for event in self.streams.events_after(session, after_sequence):
                yield event
