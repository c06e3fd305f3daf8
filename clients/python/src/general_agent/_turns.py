"""Turn, event and run-control RPCs of :class:`~general_agent.AgentClient`: StreamTurn, WatchSession,
SubmitHostedToolResult, ResolveApproval (approve / deny), InjectMessage, RequestStop, ClearStop and
CancelRun (docs/protocol.md).

The streaming answers come in two forms: ``stream_*`` yields the events to the stream's first
``run_finished``; the plain form drains them into a :class:`TurnResult`.

A ``stream_*`` call whose connection drops once its run has started is followed up with WatchSession
after the last sequence yielded, as the Go (``Turn``) and TypeScript (``turn()``) clients do: the watch
replays what was missed, events at or below that sequence and other runs' events are dropped, so the
caller sees every event of the run once, in order. The run goes on meanwhile only with
``on_disconnect="CONTINUE"``; under ``"CANCEL"`` the follow-up shows its ``STOPPED`` end.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from general_agent import _convert as conv
from general_agent._convert import BusyPolicyName, DecisionName, Image, InputLike, OnDisconnectName
from general_agent._transport import DEFAULT, Timeout, Transport, await_reconnect, new_id, transient
from general_agent.errors import AgentError
from general_agent.events import is_run_finished, outcome_name, text_of
from general_agent.v1 import event_pb2, turn_pb2


class _CarriesEvent(Protocol):
    """A response of StreamTurn, SubmitHostedToolResult, ResolveApproval or WatchSession."""

    @property
    def event(self) -> event_pb2.SessionEvent: ...


@dataclass(frozen=True, slots=True)
class TurnResult:
    """The events of one stream to its first ``run_finished``, summarised.

    Attributes:
        text: the concatenated ``assistant_delta`` text.
        outcome: ``"COMPLETED"``, ``"SUSPENDED"``, ``"STOPPED"``, ``"FAILED"``, or ``""`` when the
            stream ended without a ``run_finished``.
        events: every event received, in order.
        reason: the run reason for STOPPED / FAILED (e.g. ``"PROVIDER_ERROR"``), else ``""``.
        error: the run's failure (``run_finished.error``) as an :class:`AgentError`, else ``None``.
    """

    text: str
    outcome: str
    events: list[event_pb2.SessionEvent]
    reason: str = ""
    error: AgentError | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """True when the run completed."""
        return self.outcome == "COMPLETED"

    @property
    def run_id(self) -> str:
        """The id of the run (from its events), or ``""``."""
        return next((e.run_id for e in self.events if e.run_id), "")

    @property
    def pending_call_ids(self) -> list[str]:
        """The calls a SUSPENDED run waits for (hosted results and approvals)."""
        finished = next((e for e in reversed(self.events) if is_run_finished(e)), None)
        return [] if finished is None else list(finished.run_finished.pending_call_ids)

    @classmethod
    def from_events(cls, events: list[event_pb2.SessionEvent]) -> TurnResult:
        finished = next((e for e in reversed(events) if is_run_finished(e)), None)
        if finished is None:
            return cls(text=text_of(events), outcome="", events=events)
        run_finished = finished.run_finished
        error = AgentError.from_status(run_finished.error) if run_finished.HasField("error") else None
        return cls(
            text=text_of(events),
            outcome=outcome_name(finished),
            events=events,
            reason=reason_name(run_finished.reason),
            error=error,
        )


def reason_name(value: int) -> str:
    """``"PROVIDER_ERROR"`` for ``RUN_REASON_PROVIDER_ERROR``; ``""`` when unset; the number when unknown."""
    if value == event_pb2.RUN_REASON_UNSPECIFIED:
        return ""
    try:
        return event_pb2.RunReason.Name(event_pb2.RunReason.ValueType(value)).removeprefix("RUN_REASON_")
    except ValueError:
        return str(int(value))


async def _drain(events: AsyncIterable[event_pb2.SessionEvent]) -> TurnResult:
    return TurnResult.from_events([event async for event in events])


def hosted_result_fields(output: Any, error: str | None, details: Any) -> dict[str, Any]:
    """The ``result`` oneof and ``details`` of a hosted result: a string is the tool's text, anything else
    its exact JSON; ``error`` makes it an error result."""
    fields: dict[str, Any] = {}
    if error is not None:
        fields["error"] = error
    elif isinstance(output, str):
        fields["output"] = conv.struct_value(output)
    else:
        fields["output_json"] = conv.to_json(output)
    if details is not None:
        fields["details"] = conv.struct_value(details)
    return fields


def approval_fields(
    decision: DecisionName | int, edited_input: Mapping[str, Any] | None, message: str
) -> dict[str, Any]:
    fields: dict[str, Any] = {"decision": conv.decision(decision), "message": message}
    if edited_input is not None:
        fields["edited_input_json"] = conv.to_json(dict(edited_input))
    return fields


class TurnsMixin(Transport):
    async def stream_turn(
        self,
        session_id: str,
        text_or_parts: InputLike,
        *,
        images: Iterable[Image] = (),
        request_id: str = "",
        on_disconnect: OnDisconnectName = "CANCEL",
        busy_policy: BusyPolicyName = "REJECT",
        timeout: float | None = None,
        reconnect_timeout: float = 60.0,
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """Runs one turn and yields its events; ends after the first ``run_finished`` (terminal or
        SUSPENDED).

        ``text_or_parts`` is a string, an :class:`Image`, a ``ContentPart`` or a list mixing them;
        ``images`` are appended after it. Closing the generator early or cancelling the task cancels the
        call, which stops the run under ``on_disconnect="CANCEL"``. Errors before the run starts
        (SessionNotFound, SessionBusy, NoApiKey, INVALID_ARGUMENT) raise; run failures arrive as a
        ``run_finished`` event instead. A connection dropped after the run started is followed up with
        WatchSession (module docstring) for up to ``reconnect_timeout`` seconds without contact; a drop
        before the first event raises (UNAVAILABLE): resend with the same ``request_id`` to reattach.
        """
        request = turn_pb2.StreamTurnRequest(
            session_id=session_id,
            input=conv.parts(text_or_parts, images),
            options=turn_pb2.TurnOptions(
                busy_policy=conv.busy_policy(busy_policy), on_disconnect=conv.on_disconnect(on_disconnect)
            ),
            request_id=request_id,
        )
        stream = self._server_stream(self._stub.StreamTurn, request, timeout)
        async for event in self._followed(session_id, stream, timeout, reconnect_timeout):
            yield event

    async def run_text(
        self, session_id: str, text: str, *, request_id: str = "", timeout: float | None = None
    ) -> TurnResult:
        """Runs one text turn to its first ``run_finished`` and returns the text, outcome and events.
        A failed run is returned (``outcome="FAILED"``, ``error``), not raised."""
        return await _drain(self.stream_turn(session_id, text, request_id=request_id, timeout=timeout))

    async def watch(
        self, session_id: str, after_sequence: int | None = None, *, timeout: float | None = None
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """Yields the session's events after ``after_sequence`` (replayed from the log; ``None`` = live
        only), then live events, until the caller stops iterating. Raises AgentError OUT_OF_RANGE
        ``EVENTS_EXPIRED`` for a cursor older than retention."""
        request = turn_pb2.WatchSessionRequest(session_id=session_id, after_sequence=after_sequence)
        async for response in self._server_stream(self._stub.WatchSession, request, timeout):
            yield response.event

    async def _followed(
        self,
        session_id: str,
        stream: AsyncGenerator[_CarriesEvent, None],
        timeout: float | None,
        reconnect_timeout: float,
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """The events of one run's ``stream``, followed up with WatchSession after a transient drop (the
        module docstring). The first stream ends where the server ends it (a STEER turn may pass a
        SUSPENDED ``run_finished``); a follow-up ends at the first ``run_finished``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cursor, run_id, last_contact = 0, "", time.monotonic()
        responses = stream
        following = False
        while True:
            finished = False
            try:
                async with aclosing(responses):  # left early: the call is cancelled
                    async for response in responses:
                        last_contact = time.monotonic()
                        event: event_pb2.SessionEvent = response.event
                        if event.sequence <= cursor or (run_id and event.run_id != run_id):
                            continue  # replayed, or another run's (a watch carries the whole session)
                        cursor, run_id = event.sequence, event.run_id
                        yield event
                        finished = is_run_finished(event)
                        if finished and following:
                            return
                if finished or not run_id:
                    return
                raise AgentError(grpc.StatusCode.UNAVAILABLE, "the stream ended before the run finished")
            except AgentError as error:
                if finished:
                    return  # dropped just after the run_finished: nothing of this run is left
                if not run_id or not transient(error):
                    raise
                remaining = reconnect_timeout - (time.monotonic() - last_contact)
                await await_reconnect(self._channel, error, remaining, f"turn of session {session_id}")
            after = turn_pb2.WatchSessionRequest(session_id=session_id, after_sequence=cursor)
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            watched = self._server_stream(self._stub.WatchSession, after, left)
            responses = watched
            following = True

    # ------------------------------------------------------------------ hosted results
    async def stream_hosted_result(
        self,
        session_id: str,
        call_id: str,
        output: Any = "",
        *,
        error: str | None = None,
        details: Any = None,
        on_disconnect: OnDisconnectName = "CANCEL",
        timeout: float | None = None,
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """SubmitHostedToolResult: resolves one pending hosted call with ``output`` (a string is the tool's
        text, any other JSON value its JSON) or ``error``; yields the events to the next ``run_finished``.
        Raises UnknownToolCall, ToolCallAlreadyResolved or ApprovalPending."""
        request = turn_pb2.SubmitHostedToolResultRequest(
            session_id=session_id,
            call_id=call_id,
            on_disconnect=conv.on_disconnect(on_disconnect),
            **hosted_result_fields(output, error, details),
        )
        stream = self._server_stream(self._stub.SubmitHostedToolResult, request, timeout)
        async for event in self._followed(session_id, stream, timeout, reconnect_timeout=60.0):
            yield event

    async def submit_hosted_result(
        self,
        session_id: str,
        call_id: str,
        output: Any = "",
        *,
        error: str | None = None,
        details: Any = None,
        timeout: float | None = None,
    ) -> TurnResult:
        """:meth:`stream_hosted_result`, drained: what the run did up to its next ``run_finished``."""
        events = self.stream_hosted_result(session_id, call_id, output, error=error, details=details, timeout=timeout)
        return await _drain(events)

    # ------------------------------------------------------------------ approvals
    async def stream_approval(
        self,
        session_id: str,
        call_id: str,
        decision: DecisionName | int,
        *,
        edited_input: Mapping[str, Any] | None = None,
        message: str = "",
        on_disconnect: OnDisconnectName = "CANCEL",
        timeout: float | None = None,
    ) -> AsyncGenerator[event_pb2.SessionEvent, None]:
        """ResolveApproval: answers one pending approval; yields the events to the next ``run_finished``.
        ``edited_input`` replaces the shown input entirely (re-validated: invalid ⇒ INVALID_ARGUMENT and
        still pending). Raises UnknownToolCall or ToolCallAlreadyResolved."""
        request = turn_pb2.ResolveApprovalRequest(
            session_id=session_id,
            call_id=call_id,
            on_disconnect=conv.on_disconnect(on_disconnect),
            **approval_fields(decision, edited_input, message),
        )
        stream = self._server_stream(self._stub.ResolveApproval, request, timeout)
        async for event in self._followed(session_id, stream, timeout, reconnect_timeout=60.0):
            yield event

    async def resolve_approval(
        self,
        session_id: str,
        call_id: str,
        decision: DecisionName | int,
        *,
        edited_input: Mapping[str, Any] | None = None,
        message: str = "",
        timeout: float | None = None,
    ) -> TurnResult:
        """:meth:`stream_approval`, drained."""
        events = self.stream_approval(
            session_id, call_id, decision, edited_input=edited_input, message=message, timeout=timeout
        )
        return await _drain(events)

    async def approve(
        self,
        session_id: str,
        tool_call_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        always: bool = False,
        timeout: float | None = None,
    ) -> TurnResult:
        """Approves a pending call (``always``: also every later call of that tool in this session), with
        the shown input or ``input`` in its place. Returns what the run did up to its next ``run_finished``."""
        decision: DecisionName = "APPROVE_ALWAYS" if always else "APPROVE"
        return await self.resolve_approval(session_id, tool_call_id, decision, edited_input=input, timeout=timeout)

    async def deny(
        self, session_id: str, tool_call_id: str, message: str = "", *, timeout: float | None = None
    ) -> TurnResult:
        """Denies a pending call: the model sees a tool error with ``message``."""
        return await self.resolve_approval(session_id, tool_call_id, "DENY", message=message, timeout=timeout)

    # ------------------------------------------------------------------ run control
    async def inject(
        self,
        session_id: str,
        text_or_parts: InputLike,
        *,
        images: Iterable[Image] = (),
        request_id: str = "",
        timeout: Timeout = DEFAULT,
    ) -> str:
        """InjectMessage: steers the running or suspended run; returns its run id, or ``""`` when the
        session was idle (nothing written)."""
        request = turn_pb2.InjectMessageRequest(
            session_id=session_id, input=conv.parts(text_or_parts, images), request_id=request_id or new_id()
        )
        response: turn_pb2.InjectMessageResponse = await self._unary(self._stub.InjectMessage, request, timeout)
        return response.run_id if response.accepted else ""

    async def request_stop(self, session_id: str, *, timeout: Timeout = DEFAULT) -> str:
        """Sets the sticky stop flag (the current run stops; later runs stop at once until
        :meth:`clear_stop`); returns the id of the run it stopped, or ``""``."""
        request = turn_pb2.RequestStopRequest(session_id=session_id)
        response: turn_pb2.RequestStopResponse = await self._unary(self._stub.RequestStop, request, timeout)
        return response.run_id

    async def clear_stop(self, session_id: str, *, timeout: Timeout = DEFAULT) -> bool:
        """Clears the stop flag; True when it was set."""
        request = turn_pb2.ClearStopRequest(session_id=session_id)
        response: turn_pb2.ClearStopResponse = await self._unary(self._stub.ClearStop, request, timeout)
        return response.was_set

    async def cancel_run(self, session_id: str, run_id: str = "", *, timeout: Timeout = DEFAULT) -> str:
        """Stops the current run once (``run_id``: only if it is still that run); returns the id of the run
        cancelled, or ``""`` when there was none."""
        request = turn_pb2.CancelRunRequest(session_id=session_id, run_id=run_id)
        response: turn_pb2.CancelRunResponse = await self._unary(self._stub.CancelRun, request, timeout)
        return response.run_id if response.cancelled else ""
