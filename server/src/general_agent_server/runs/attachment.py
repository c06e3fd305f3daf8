"""The RunSession protocol (spec 5.5): one bidirectional stream per host connection. After `attach`, the
stream carries every event of the session after the cursor, whoever caused it; commands from the stream
apply in order and each gets a command_result; only protocol errors end the stream. On half-close the
server keeps sending until every run this stream started or continued has reached a run_finished."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.errors import ServiceError, internal
from general_agent_server.domain.events import RunFinished, RunReason, SequencedEvent
from general_agent_server.domain.records import CallResult
from general_agent_server.domain.session import SessionState
from general_agent_server.domain.validation import check_sequence, check_session_id
from general_agent_server.runs.control import OnDisconnect, TurnOptions
from general_agent_server.sessions.live import ActiveRun, SessionActor

if TYPE_CHECKING:
    from general_agent_server.sessions.idempotency import Idempotency
    from general_agent_server.sessions.service import AgentCore, CallContext

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Attach:
    session_id: str
    after_sequence: int | None = None
    on_disconnect: OnDisconnect = OnDisconnect.CANCEL


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnCommand:
    command_id: str
    parts: tuple[ContentPart, ...]
    options: TurnOptions = field(default_factory=TurnOptions)
    idem: Idempotency | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HostedResultCommand:
    command_id: str
    call_id: str
    result: CallResult


@dataclass(frozen=True, kw_only=True, slots=True)
class InjectCommand:
    command_id: str
    parts: tuple[ContentPart, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class StopCommand:
    command_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ClearStopCommand:
    command_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelCommand:
    command_id: str
    run_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class PingCommand:
    pass


@dataclass(frozen=True, kw_only=True, slots=True)
class RejectedCommand:
    """A command the transport could not decode: it is answered with its error; the stream goes on."""

    command_id: str
    error: ServiceError


Command = (
    TurnCommand
    | HostedResultCommand
    | InjectCommand
    | StopCommand
    | ClearStopCommand
    | CancelCommand
    | PingCommand
    | RejectedCommand
)


@dataclass(frozen=True, kw_only=True, slots=True)
class EventOut:
    event: SequencedEvent


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandOut:
    command_id: str
    error: ServiceError | None = None
    run_id: str = ""
    accepted: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatOut:
    last_sequence: int


Output = EventOut | CommandOut | HeartbeatOut


class _Wake:
    """Marks a change the main loop must re-check (a run finished, the reader ended)."""


_WAKE = _Wake()


class _Closed:
    """The session closed its subscribers (it was deleted): the stream ends after what was buffered."""


_CLOSED = _Closed()


class RunSessionStream:
    """One RunSession call."""

    def __init__(self, core: AgentCore, ctx: CallContext, attach: Attach) -> None:
        self._core = core
        self._ctx = ctx
        self._attach = attach
        self._owned: dict[str, ActiveRun] = {}
        self._out: asyncio.Queue[Output | _Wake | _Closed | BaseException] = asyncio.Queue(
            maxsize=core.settings.subscriber_buffer
        )
        self._reader_done = False
        self._last_yielded = 0

    async def run(self, commands: AsyncIterator[Command]) -> AsyncIterator[Output]:
        attach = self._attach
        check_session_id(attach.session_id, "attach.session_id")
        check_sequence(attach.after_sequence, "attach.after_sequence")
        self._core.check_serving()
        async with self._core.registry.use(self._ctx.tenant, attach.session_id) as actor:
            subscribed = asyncio.Event()
            pump = asyncio.create_task(self._pump_events(actor, subscribed.set), name="run-session-events")
            await subscribed.wait()
            reader = asyncio.create_task(self._read_commands(actor, commands), name="run-session-commands")
            try:
                while True:
                    if self._reader_done and self._owned_runs_done(actor) and self._out.empty():
                        return
                    # Not asyncio.wait_for: before Python 3.12 it swallows a cancellation that arrives in the
                    # same loop iteration as the item. A client cancel does exactly that (its request stream
                    # ends, which wakes this queue, as the handler task is cancelled), and the stream would
                    # then wait like a half-close and never apply on_disconnect.
                    try:
                        async with asyncio.timeout(self._core.settings.heartbeat_seconds):
                            item = await self._out.get()
                    except TimeoutError:
                        yield HeartbeatOut(last_sequence=actor.last_assigned_sequence)
                        continue
                    if isinstance(item, BaseException):
                        raise item
                    if isinstance(item, _Wake):
                        continue
                    if isinstance(item, _Closed):
                        return
                    if isinstance(item, EventOut):
                        self._last_yielded = item.event.sequence
                    yield item
            finally:
                reader.cancel()
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(reader, pump, return_exceptions=True)
                if attach.on_disconnect is OnDisconnect.CANCEL:
                    for run in self._owned.values():
                        if not run.finished.is_set():
                            actor.cancel_run(RunReason.CANCELLED, run.run_id)

    def _owned_runs_done(self, actor: SessionActor) -> bool:
        for run in self._owned.values():
            suspended = actor.run is run and actor.record.state is SessionState.SUSPENDED
            if not (run.finished.is_set() or suspended):
                return False
        # Everything already emitted (the run_finished included) has been sent.
        return not self._owned or self._last_yielded >= actor.last_assigned_sequence

    async def _pump_events(self, actor: SessionActor, on_subscribed: object) -> None:
        try:
            async for event in self._core.turns.events_after(
                actor,
                self._attach.after_sequence,
                on_subscribed=on_subscribed,  # type: ignore[arg-type]
            ):
                await self._out.put(EventOut(event=event))
                if isinstance(event.body, RunFinished) and event.run_id in self._owned:
                    await self._out.put(_WAKE)
            # The live subscription ended without an error: the session was deleted. Like WatchSession, the
            # stream ends OK; without this it stayed attached to a forgotten actor and answered commands
            # (a turn got INTERNAL from the store) until the client gave up.
            await self._out.put(_CLOSED)
        except ServiceError as error:
            await self._out.put(error)

    async def _read_commands(self, actor: SessionActor, commands: AsyncIterator[Command]) -> None:
        try:
            async for command in commands:
                outcome = await self._apply(actor, command)
                if outcome is not None:
                    await self._out.put(outcome)
        except ServiceError as error:
            await self._out.put(error)
        finally:
            self._reader_done = True
            with contextlib.suppress(asyncio.QueueFull):
                self._out.put_nowait(_WAKE)

    async def _apply(self, actor: SessionActor, command: Command) -> Output | None:
        if isinstance(command, PingCommand):
            return HeartbeatOut(last_sequence=actor.last_assigned_sequence)
        if isinstance(command, RejectedCommand):
            return CommandOut(command_id=command.command_id, error=command.error)
        turns = self._core.turns
        try:
            if isinstance(command, TurnCommand):
                turns.check_input(command.parts, "turn.input")
                admission = await turns.admit(actor, command.parts, command.options.busy_policy, command.idem)
                if admission.run is not None:
                    self._owned[admission.run.run_id] = admission.run
                    return CommandOut(command_id=command.command_id, run_id=admission.run.run_id, accepted=True)
                return CommandOut(
                    command_id=command.command_id,
                    run_id=admission.steered_run_id,
                    accepted=bool(admission.steered_run_id),
                )
            if isinstance(command, HostedResultCommand):
                # A result that arrives before the suspension is committed waits for it outside the lock, so
                # commands of other streams are not held up while local tools run.
                await actor.wait_until_exposed(command.call_id)
                async with actor.lock:
                    resolution, continued = await turns.resolve(actor, command.call_id, command.result)
                if continued is not None:
                    self._owned[continued.run_id] = continued
                run_id = actor.run.run_id if actor.run is not None else ""
                return CommandOut(command_id=command.command_id, run_id=run_id, accepted=not resolution.replay)
            if isinstance(command, InjectCommand):
                turns.check_input(command.parts, "inject.input")
                async with actor.lock:
                    run_id = await actor.inject(command.parts)
                return CommandOut(command_id=command.command_id, run_id=run_id, accepted=bool(run_id))
            if isinstance(command, StopCommand):
                async with actor.lock:
                    await actor.set_stop_flag(True)
                    run_id = await actor.stop_run(RunReason.STOP_REQUESTED)
                return CommandOut(command_id=command.command_id, run_id=run_id, accepted=True)
            if isinstance(command, ClearStopCommand):
                async with actor.lock:
                    was_set = await actor.set_stop_flag(False)
                return CommandOut(command_id=command.command_id, accepted=was_set)
            async with actor.lock:
                run_id = await actor.stop_run(RunReason.CANCELLED, command.run_id)
            return CommandOut(command_id=command.command_id, run_id=run_id, accepted=bool(run_id))
        except ServiceError as error:
            return CommandOut(command_id=command.command_id, error=error)
        except Exception:
            logger.exception("RunSession command failed", extra={"category": "system"})
            return CommandOut(command_id=command.command_id, error=internal("the command failed; see the server log"))
