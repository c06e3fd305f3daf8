"""One RunSession stream attached to a session (docs/protocol.md, RunSession).

After `attach` the stream carries every event of the session after the cursor, whoever caused it. Commands
from the stream apply in order through the run control (runs/control.py), the same handler the unary RPCs
use, and each gets a command_result; only protocol errors end the stream. On half-close the server keeps
sending until every run this stream started or continued has reached a run_finished.

Three tasks cooperate: the event pump (the session's event stream into the output queue), the command reader
(commands applied in order, their results into the output queue) and the caller's loop, which drains the
queue, sends heartbeats when idle, and decides when the stream is over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from general_agent_server.domain.context import CallContext
from general_agent_server.domain.errors import ServiceError, internal
from general_agent_server.domain.events import RunFinished, RunReason
from general_agent_server.domain.session import SessionState
from general_agent_server.domain.validation import check_sequence, check_session_id
from general_agent_server.runs.commands import (
    Attach,
    CancelCommand,
    ClearStopCommand,
    Command,
    CommandOut,
    EventOut,
    HeartbeatOut,
    HostedResultCommand,
    InjectCommand,
    Output,
    PingCommand,
    RejectedCommand,
    ResolveApprovalCommand,
    StopCommand,
    TurnCommand,
)
from general_agent_server.runs.control import RunControl
from general_agent_server.runs.state import ActiveRun, OnDisconnect
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.live import LiveSession
from general_agent_server.sessions.serving import ServingGate

logger = logging.getLogger(__name__)


class _Wake:
    """Marks a change the main loop must re-check (a run finished, the reader ended)."""


_WAKE = _Wake()


class _Closed:
    """The session closed its subscribers (it was deleted): the stream ends after what was buffered."""


_CLOSED = _Closed()

_Item = Output | _Wake | _Closed | BaseException


class Attachment:
    """One RunSession call."""

    def __init__(
        self,
        *,
        control: RunControl,
        cache: SessionCache,
        gate: ServingGate,
        ctx: CallContext,
        attach: Attach,
        buffer: int,
        heartbeat_seconds: float,
    ) -> None:
        self._control = control
        self._cache = cache
        self._gate = gate
        self._ctx = ctx
        self._attach = attach
        self._heartbeat_seconds = heartbeat_seconds
        self._owned: dict[str, ActiveRun] = {}
        self._out: asyncio.Queue[_Item] = asyncio.Queue(maxsize=buffer)
        self._reader_done = False
        self._last_yielded = 0

    async def run(self, commands: AsyncIterator[Command]) -> AsyncIterator[Output]:
        attach = self._attach
        check_session_id(attach.session_id, "attach.session_id")
        check_sequence(attach.after_sequence, "attach.after_sequence")
        self._gate.check()
        async with self._cache.use(self._ctx.tenant, attach.session_id) as session:
            subscribed = asyncio.Event()
            pump = asyncio.create_task(self._pump_events(session, subscribed.set), name="run-session-events")
            await subscribed.wait()
            reader = asyncio.create_task(self._read_commands(session, commands), name="run-session-commands")
            try:
                async for output in self._drain(session):
                    yield output
            finally:
                reader.cancel()
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(reader, pump, return_exceptions=True)
                if attach.on_disconnect is OnDisconnect.CANCEL:
                    for run in self._owned.values():
                        if not run.finished.is_set():
                            session.cancel_run(RunReason.CANCELLED, run.run_id)

    async def _drain(self, session: LiveSession) -> AsyncIterator[Output]:
        while True:
            if self._reader_done and self._owned_runs_done(session) and self._out.empty():
                return
            # Not asyncio.wait_for: before Python 3.12 it swallows a cancellation that arrives in the same loop
            # iteration as the item (https://github.com/python/cpython/issues/86296). A client cancel does exactly
            # that (its request stream ends, which wakes this queue, as the handler task is cancelled), and the
            # stream would then wait like a half-close and never apply on_disconnect.
            try:
                async with asyncio.timeout(self._heartbeat_seconds):
                    item = await self._out.get()
            except TimeoutError:
                yield HeartbeatOut(last_sequence=session.ledger.last_assigned_sequence)
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

    def _owned_runs_done(self, session: LiveSession) -> bool:
        for run in self._owned.values():
            suspended = session.run is run and session.record.state is SessionState.SUSPENDED
            if not (run.finished.is_set() or suspended):
                return False
        # Everything already emitted (the run_finished included) has been sent.
        return not self._owned or self._last_yielded >= session.ledger.last_assigned_sequence

    async def _pump_events(self, session: LiveSession, on_subscribed: Callable[[], None]) -> None:
        try:
            async for event in self._control.streams.events_after(
                session, self._attach.after_sequence, on_subscribed=on_subscribed
            ):
                await self._out.put(EventOut(event=event))
                if isinstance(event.body, RunFinished) and event.run_id in self._owned:
                    await self._out.put(_WAKE)
            # The live subscription ended without an error: the session was deleted. Like WatchSession, the
            # stream ends OK instead of staying attached to a session that no longer exists.
            await self._out.put(_CLOSED)
        except ServiceError as error:
            await self._out.put(error)

    async def _read_commands(self, session: LiveSession, commands: AsyncIterator[Command]) -> None:
        try:
            async for command in commands:
                outcome = await self._apply(session, command)
                if outcome is not None:
                    await self._out.put(outcome)
        except ServiceError as error:
            await self._out.put(error)
        finally:
            self._reader_done = True
            with contextlib.suppress(asyncio.QueueFull):
                self._out.put_nowait(_WAKE)

    async def _apply(self, session: LiveSession, command: Command) -> Output | None:
        if isinstance(command, PingCommand):
            return HeartbeatOut(last_sequence=session.ledger.last_assigned_sequence)
        if isinstance(command, RejectedCommand):
            return CommandOut(command_id=command.command_id, error=command.error)
        try:
            return await self._command(session, command)
        except ServiceError as error:
            return CommandOut(command_id=command.command_id, error=error)
        except Exception:
            logger.exception("RunSession command failed", extra={"category": "system"})
            return CommandOut(command_id=command.command_id, error=internal("the command failed; see the server log"))

    async def _command(
        self,
        session: LiveSession,
        command: TurnCommand
        | HostedResultCommand
        | ResolveApprovalCommand
        | InjectCommand
        | StopCommand
        | ClearStopCommand
        | CancelCommand,
    ) -> CommandOut:
        control, command_id = self._control, command.command_id
        if isinstance(command, TurnCommand):
            admission = await control.admit(session, command.parts, command.options, command.idem, "turn.input")
            if admission.run is not None:
                self._owned[admission.run.run_id] = admission.run
                return CommandOut(command_id=command_id, run_id=admission.run.run_id, accepted=True)
            steered = admission.steered_run_id
            return CommandOut(command_id=command_id, run_id=steered, accepted=bool(steered))
        if isinstance(command, HostedResultCommand | ResolveApprovalCommand):
            if isinstance(command, HostedResultCommand):
                resolution = await control.resolve(session, command.call_id, command.result)
            else:
                resolution = await control.answer(session, command.call_id, command.answer)
            if resolution.continued is not None:
                self._owned[resolution.continued.run_id] = resolution.continued
            run_id = session.run.run_id if session.run is not None else ""
            return CommandOut(command_id=command_id, run_id=run_id, accepted=not resolution.replay)
        if isinstance(command, InjectCommand):
            run_id = await control.inject_into(session, self._ctx, command.parts, field_path="inject.input")
            return CommandOut(command_id=command_id, run_id=run_id, accepted=bool(run_id))
        if isinstance(command, StopCommand):
            return CommandOut(command_id=command_id, run_id=await session.request_stop(), accepted=True)
        if isinstance(command, ClearStopCommand):
            return CommandOut(command_id=command_id, accepted=await session.clear_stop())
        run_id = await session.stop(RunReason.CANCELLED, command.run_id)
        return CommandOut(command_id=command_id, run_id=run_id, accepted=bool(run_id))
