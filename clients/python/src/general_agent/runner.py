"""``client.run()``: one run driven over ``RunSession``, its hosted calls and approvals answered, and a
dropped stream reattached where it left off (docs/python-client.md).

How it stays exact across a drop: the stream attaches with ``after_sequence`` = the last sequence seen
(at first the session's ``last_sequence``), so the server replays what was missed, and events at or
below the cursor are dropped, so nothing is seen twice. The turn carries a fixed ``request_id``: resent
after a drop that hid its ``command_result``, it is the same turn (the server attaches to it). Answers
(hosted results, approval decisions) are kept until their ``command_result`` arrives and resent after a
reattach; an identical answer to a resolved call is not an error. The run goes on while no stream is
attached (``on_disconnect=CONTINUE``), also across a server restart: hosted calls and approvals wait.

A run ends for this helper at its terminal ``run_finished``, or at a ``SUSPENDED`` one that waits for a
call it cannot answer (no handler for the tool, or no ``on_approval``): the result's outcome is then
``"SUSPENDED"`` and the host answers later (``client.submit_hosted_result``, ``client.approve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import grpc
import pydantic

from general_agent import _convert as conv
from general_agent._convert import BusyPolicyName, DecisionName
from general_agent._transport import await_reconnect, new_id, transient
from general_agent._turns import approval_fields, hosted_result_fields
from general_agent.errors import AgentError
from general_agent.event_types import (
    ApprovalRequested,
    Event,
    HostedToolCall,
    RunFinished,
    RunStarted,
    RunUsage,
    run_text,
    to_event,
)
from general_agent.v1 import content_pb2, run_session_pb2, turn_pb2

if TYPE_CHECKING:
    from general_agent.client import AgentClient

__all__ = ["ApprovalAnswer", "ApprovalLike", "OnApproval", "OnHostedCall", "Run", "RunResult"]

_LOG = logging.getLogger(__name__)
_IGNORED_ANSWER_ERRORS = frozenset({"TOOL_CALL_ALREADY_RESOLVED", "UNKNOWN_TOOL_CALL"})


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """What ``on_approval`` decides: ``ApprovalAnswer.approve(input=None, always=False)`` or
    ``ApprovalAnswer.deny(message)``."""

    decision: DecisionName
    input: Mapping[str, Any] | None = None
    message: str = ""

    @classmethod
    def approve(cls, input: Mapping[str, Any] | None = None, *, always: bool = False) -> ApprovalAnswer:
        return cls("APPROVE_ALWAYS" if always else "APPROVE", input)

    @classmethod
    def deny(cls, message: str = "") -> ApprovalAnswer:
        return cls("DENY", None, message)


ApprovalLike: TypeAlias = ApprovalAnswer | bool | Literal["approve", "always", "deny"]
"""An answer: an :class:`ApprovalAnswer`, True / ``"approve"``, ``"always"``, or False / ``"deny"``."""
OnApproval: TypeAlias = Callable[[ApprovalRequested], Awaitable[ApprovalLike] | ApprovalLike]
OnHostedCall: TypeAlias = Callable[[HostedToolCall], Awaitable[Any]]
"""Answers a hosted call no registered handler takes: returns the output, or raises for an error result."""


def _answer(value: ApprovalLike) -> ApprovalAnswer:
    if isinstance(value, ApprovalAnswer):
        return value
    if value is True or value == "approve":
        return ApprovalAnswer.approve()
    if value == "always":
        return ApprovalAnswer.approve(always=True)
    if value is False or value == "deny":
        return ApprovalAnswer.deny("denied by the host")
    raise TypeError(f"on_approval returned {value!r}; return an ApprovalAnswer, a bool, 'always' or 'deny'")


@dataclass(frozen=True, slots=True)
class RunResult:
    """The end of :meth:`AgentClient.run`: outcome COMPLETED, STOPPED, FAILED, or SUSPENDED (waiting for
    calls this client could not answer, ``pending_call_ids``)."""

    outcome: str
    run_id: str
    text: str
    events: list[Event]
    reason: str = ""
    usage: RunUsage = field(default_factory=RunUsage)
    pending_call_ids: tuple[str, ...] = ()
    error: AgentError | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.outcome == "COMPLETED"


class Run:
    """A run in progress: ``async for event in run`` yields its typed events (each with ``sequence``);
    ``await run`` drains it and returns the :class:`RunResult` (also :attr:`result` after iterating)."""

    def __init__(
        self,
        client: AgentClient,
        session_id: str,
        parts: list[content_pb2.ContentPart],
        *,
        on_approval: OnApproval | None,
        on_hosted_call: OnHostedCall | None = None,
        request_id: str,
        busy_policy: BusyPolicyName,
        reconnect_timeout: float,
    ) -> None:
        self._client = client
        self._session_id = session_id
        self._on_approval = on_approval
        self._on_hosted_call = on_hosted_call
        self._request_id = request_id or new_id()
        self._turn = run_session_pb2.RunSessionRequest(
            turn=run_session_pb2.RunSessionTurn(
                command_id=f"turn-{self._request_id}",
                request_id=self._request_id,
                input=parts,
                options=turn_pb2.TurnOptions(
                    busy_policy=conv.busy_policy(busy_policy), on_disconnect=conv.on_disconnect("CONTINUE")
                ),
            )
        )
        self._reconnect_timeout = reconnect_timeout
        self._cursor = 0
        self._run_id = ""
        self._turn_confirmed = False
        self._buffer: list[Event] = []
        self._events: list[Event] = []
        self._answers: dict[str, run_session_pb2.RunSessionRequest] = {}  # call id -> answer not confirmed
        self._working: dict[str, asyncio.Task[None]] = {}  # call id -> handler or on_approval task
        self._seen_calls: set[str] = set()
        self._unanswerable: set[str] = set()  # calls without a handler (or without on_approval)
        self._queue: asyncio.Queue[run_session_pb2.RunSessionRequest | None] = asyncio.Queue()
        self._finished: RunFinished | None = None
        self._started = False
        self.result: RunResult | None = None
        """The result, once the run has ended for this helper."""

    @property
    def run_id(self) -> str:
        """The run's id (``""`` until the server has admitted the turn)."""
        return self._run_id

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self._drain().__await__()

    async def _drain(self) -> RunResult:
        async for _ in self:
            pass
        assert self.result is not None
        return self.result

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._started:
            raise RuntimeError("a Run is iterated once")
        self._started = True
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        session = await self._client.get_session(self._session_id)
        self._cursor = session.last_sequence
        last_contact = time.monotonic()
        try:
            while self._finished is None:
                try:
                    async for event in self._attachment():
                        last_contact = time.monotonic()
                        yield event
                except AgentError as error:
                    if not transient(error):
                        raise
                    remaining = self._reconnect_timeout - (time.monotonic() - last_contact)
                    await await_reconnect(self._client.channel, error, remaining, f"run of session {self._session_id}")
            self.result = self._result(self._finished)
        finally:
            await self._close()

    async def _attachment(self) -> AsyncIterator[Event]:
        """One RunSession stream: attach after the cursor, (re)send what is not confirmed, follow."""
        queue: asyncio.Queue[run_session_pb2.RunSessionRequest | None] = asyncio.Queue()
        self._queue = queue
        attach = run_session_pb2.RunSessionAttach(
            session_id=self._session_id, after_sequence=self._cursor, on_disconnect=conv.on_disconnect("CONTINUE")
        )
        queue.put_nowait(run_session_pb2.RunSessionRequest(attach=attach))
        if not self._turn_confirmed:
            queue.put_nowait(self._turn)
        for answer in self._answers.values():
            queue.put_nowait(answer)

        async def requests() -> AsyncIterator[run_session_pb2.RunSessionRequest]:
            while (item := await queue.get()) is not None:
                yield item

        call, request_id = self._client._bidi(self._client.stub.RunSession, requests(), wait_for_ready=True)
        try:
            async for response in call:
                for event in self._on_response(response):
                    yield event
                if self._finished is not None:
                    return
        except grpc.aio.AioRpcError as err:
            raise AgentError.from_rpc_error(err, request_id=request_id) from err
        finally:
            queue.put_nowait(None)
            call.cancel()
        # The server ended the stream without an error before the run ended: attach again.
        raise AgentError(grpc.StatusCode.UNAVAILABLE, "the RunSession stream ended early", request_id=request_id)

    def _on_response(self, response: run_session_pb2.RunSessionResponse) -> list[Event]:
        kind = response.WhichOneof("response")
        if kind == "command_result":
            return self._on_command_result(response.command_result)
        if kind != "event" or response.event.sequence <= self._cursor:
            return []
        self._cursor = response.event.sequence
        event = to_event(response.event)
        if not self._run_id:
            if isinstance(event, RunStarted) and event.request_id == self._request_id:
                self._run_id = event.run_id
                return [*self._flush(), *self._accept(event)]
            self._buffer.append(event)
            return []
        return self._accept(event) if event.run_id == self._run_id else []

    def _on_command_result(self, result: run_session_pb2.CommandResult) -> list[Event]:
        failed = result.HasField("status") and result.status.code != 0
        if result.command_id == self._turn.turn.command_id:
            if failed:
                raise AgentError.from_status(result.status)
            self._turn_confirmed = True
            if result.run_id and not self._run_id:
                self._run_id = result.run_id
                return self._flush()
            return []
        call_id = result.command_id.removeprefix("answer-")
        if self._answers.pop(call_id, None) is not None and failed:
            error = AgentError.from_status(result.status)
            if error.reason not in _IGNORED_ANSWER_ERRORS:
                raise error
        return []

    def _flush(self) -> list[Event]:
        buffered, self._buffer = self._buffer, []
        accepted: list[Event] = []
        for event in buffered:
            if event.run_id == self._run_id:
                accepted.extend(self._accept(event))
        return accepted

    def _accept(self, event: Event) -> list[Event]:
        """An event of this run: start answering its calls; note its end."""
        self._events.append(event)
        if isinstance(event, HostedToolCall):
            self._start(event.call_id, self._hosted_work(event))
        elif isinstance(event, ApprovalRequested):
            on_approval = self._on_approval
            self._start(event.call_id, None if on_approval is None else lambda: self._ask(event, on_approval))
        elif isinstance(event, RunFinished) and (event.terminal or self._stuck(event)):
            self._finished = event
        return [event]

    def _stuck(self, finished: RunFinished) -> bool:
        """True when the suspension waits for a call this client will not answer."""
        return any(c in self._unanswerable or c not in self._seen_calls for c in finished.pending_call_ids)

    def _start(self, call_id: str, work: Callable[[], Awaitable[None]] | None) -> None:
        self._seen_calls.add(call_id)
        if work is None:
            self._unanswerable.add(call_id)
        elif call_id not in self._working:
            self._unanswerable.discard(call_id)
            self._working[call_id] = asyncio.ensure_future(work())

    def _hosted_work(self, call: HostedToolCall) -> Callable[[], Awaitable[None]] | None:
        tool = self._client.hosted_tools.get(call.tool_name)
        if tool is not None:
            return lambda: self._run_tool(tool.call, call)
        on_hosted_call = self._on_hosted_call
        if on_hosted_call is not None:
            return lambda: self._run_tool(lambda _: on_hosted_call(call), call)
        return None

    async def _run_tool(self, handler: Callable[[dict[str, Any]], Awaitable[Any]], call: HostedToolCall) -> None:
        try:
            output = await handler(call.input)
        except pydantic.ValidationError as exc:
            self._send(call.call_id, hosted_result_fields(None, f"invalid input: {exc}", None))
        except Exception as exc:
            _LOG.info("hosted tool %s failed: %s", call.tool_name, exc)
            self._send(call.call_id, hosted_result_fields(None, str(exc) or type(exc).__name__, None))
        else:
            self._send(call.call_id, hosted_result_fields(_jsonable(output), None, None))

    async def _ask(self, request: ApprovalRequested, on_approval: OnApproval) -> None:
        try:
            decided = on_approval(request)
            value = await decided if inspect.isawaitable(decided) else decided
            answer = _answer(value)
        except Exception as exc:
            _LOG.warning("on_approval failed for %s: %s", request.call_id, exc)
            answer = ApprovalAnswer.deny(f"the approval callback failed: {exc}")
        fields = approval_fields(answer.decision, answer.input, answer.message)
        self._send(request.call_id, fields, approval=True)

    def _send(self, call_id: str, fields: dict[str, Any], *, approval: bool = False) -> None:
        command_id = f"answer-{call_id}"
        if approval:
            body = run_session_pb2.RunSessionResolveApproval(command_id=command_id, call_id=call_id, **fields)
            request = run_session_pb2.RunSessionRequest(resolve_approval=body)
        else:
            hosted = run_session_pb2.RunSessionHostedResult(command_id=command_id, call_id=call_id, **fields)
            request = run_session_pb2.RunSessionRequest(hosted_result=hosted)
        self._answers[call_id] = request
        self._queue.put_nowait(request)
        del self._working[call_id]  # answered: a later request for the same call id (approved, then hosted) runs

    def _result(self, finished: RunFinished) -> RunResult:
        return RunResult(
            outcome=finished.outcome,
            run_id=self._run_id,
            text=run_text(self._events),
            events=list(self._events),
            reason=finished.reason,
            usage=finished.usage,
            pending_call_ids=finished.pending_call_ids if not finished.terminal else (),
            error=finished.error,
        )

    async def _close(self) -> None:
        tasks = [task for task in self._working.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._finished is None and self._run_id:
            # Left early (the caller stopped iterating, or an error): the run must not go on alone.
            with contextlib.suppress(AgentError):
                await self._client.cancel_run(self._session_id, self._run_id, timeout=5.0)


def _jsonable(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    return value
