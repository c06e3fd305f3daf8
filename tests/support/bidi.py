"""RunSession test plumbing: `Bidi`, one bidirectional call driven by a queue-backed request iterator, so a test
decides exactly when a command is sent and when the client half-closes, and the small helpers RunSession tests
share (a session with a hosted tool, a stream whose turn hangs in its model call)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import grpc
import pytest

from general_agent.testing import FakeAnthropic, HangReply
from general_agent.v1 import event_pb2, hosted_tool_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from tests.support.events import sequences
from tests.support.rpc import Stub, create_session, decode_error, text_input
from tests.support.runs import hang

READ_TIMEOUT = 10.0

# The events of a run that answers with text and no tool call.
TEXT_RUN = ["run_started", "assistant_delta", "usage_snapshot", "turn_complete", "run_finished"]

LOOKUP_SCHEMA_JSON = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


class Bidi:
    """One RunSession call. Requests go through an asyncio.Queue (None = half-close); every response read is
    kept in `log`, so waiting for one response never loses the others."""

    opened: ClassVar[list[Bidi]] = []  # half-closed after each test (close_request_iterators)

    def __init__(self, stub: Stub) -> None:
        Bidi.opened.append(self)
        self._queue: asyncio.Queue[run_session_api.RunSessionRequest | None] = asyncio.Queue()
        self.half_closed = asyncio.Event()
        self.call = stub.RunSession(self._requests())
        self.log: list[run_session_api.RunSessionResponse] = []
        self.ended = False

    async def _requests(self) -> AsyncIterator[run_session_api.RunSessionRequest]:
        while (request := await self._queue.get()) is not None:
            yield request
        self.half_closed.set()

    # -- sending
    def send(self, **command: Any) -> None:
        self._queue.put_nowait(run_session_api.RunSessionRequest(**command))

    def attach(self, session_id: str, **fields: Any) -> None:
        self.send(attach=run_session_api.RunSessionAttach(session_id=session_id, **fields))

    def turn(self, command_id: str, *texts: str, **fields: Any) -> None:
        self.send(turn=run_session_api.RunSessionTurn(command_id=command_id, input=text_input(*texts), **fields))

    def close(self) -> None:
        """Half-close: the request iterator ends."""
        self._queue.put_nowait(None)

    # -- receiving
    async def read(self) -> run_session_api.RunSessionResponse | None:
        """The next response, or None at the end of the stream (an RPC error raises AioRpcError)."""
        try:
            response = await asyncio.wait_for(self.call.read(), READ_TIMEOUT)
        except TimeoutError:
            raise AssertionError(f"no response within {READ_TIMEOUT}s; got so far {self.summary()}") from None
        if response is grpc.aio.EOF:
            self.ended = True
            return None
        assert isinstance(response, run_session_api.RunSessionResponse)
        self.log.append(response)
        return response

    async def wait(
        self, predicate: Callable[[run_session_api.RunSessionResponse], bool], start: int = 0
    ) -> run_session_api.RunSessionResponse:
        """The first response from log[start:] (reading more as needed) that matches."""
        index = start
        while True:
            while index < len(self.log):
                if predicate(self.log[index]):
                    return self.log[index]
                index += 1
            if await self.read() is None:
                raise AssertionError(f"stream ended before the expected response; got {self.summary()}")

    async def result(self, command_id: str) -> run_session_api.CommandResult:
        response = await self.wait(
            lambda r: r.WhichOneof("response") == "command_result" and r.command_result.command_id == command_id
        )
        return response.command_result

    async def finished(self, run_id: str, *, terminal: bool = True, start: int = 0) -> event_pb2.SessionEvent:
        """The run's first (terminal, by default) run_finished."""

        def match(response: run_session_api.RunSessionResponse) -> bool:
            event = response.event
            return (
                response.WhichOneof("response") == "event"
                and event.run_id == run_id
                and event.WhichOneof("event") == "run_finished"
                and (not terminal or event.run_finished.outcome != event_pb2.RUN_OUTCOME_SUSPENDED)
            )

        return (await self.wait(match, start)).event

    async def first_event(self, run_id: str, kind: str) -> event_pb2.SessionEvent:
        response = await self.wait(
            lambda r: (
                r.WhichOneof("response") == "event" and r.event.run_id == run_id and r.event.WhichOneof("event") == kind
            )
        )
        return response.event

    async def drain(self) -> None:
        """Reads to the end of the stream (OK); an RPC error raises."""
        while await self.read() is not None:
            pass

    def events(self, run_id: str | None = None) -> list[event_pb2.SessionEvent]:
        return [
            r.event
            for r in self.log
            if r.WhichOneof("response") == "event" and (run_id is None or r.event.run_id == run_id)
        ]

    def summary(self) -> list[str]:
        out = []
        for r in self.log:
            which = r.WhichOneof("response")
            out.append(f"event:{r.event.WhichOneof('event')}" if which == "event" else str(which))
        return out

    def cancel(self) -> None:
        self.call.cancel()


@pytest.fixture(autouse=True)
async def close_request_iterators() -> AsyncIterator[None]:
    """A call that ended with an error leaves grpc's request-sending task waiting in `_requests`; half-closing
    every call lets that generator finish instead of being finalised while suspended (which asyncio reports
    as an unretrieved exception at the next garbage collection)."""
    yield
    for bidi in Bidi.opened:
        bidi.close()
    Bidi.opened.clear()
    await asyncio.sleep(0)  # one loop turn: each waiting generator takes its None and returns


async def open_bidi(stub: Stub, session_id: str, **attach: Any) -> Bidi:
    bidi = Bidi(stub)
    bidi.attach(session_id, **attach)
    return bidi


async def rpc_failure(bidi: Bidi) -> Any:
    try:
        await bidi.drain()
    except grpc.aio.AioRpcError as error:
        return decode_error(error)
    raise AssertionError(f"the stream ended OK; expected an error (got {bidi.summary()})")


def lookup_tool() -> hosted_tool_pb2.HostedToolDefinition:
    return hosted_tool_pb2.HostedToolDefinition(
        name="lookup", description="ask the host", input_schema_json=LOOKUP_SCHEMA_JSON
    )


async def hosted_session(stub: Stub) -> str:
    session = await create_session(stub, hosted_tools=[lookup_tool()])
    return session.identity.session_id


def assert_strictly_increasing(events: list[event_pb2.SessionEvent]) -> None:
    seqs = sequences(events)
    assert all(a < b for a, b in itertools.pairwise(seqs)), seqs


def without_deltas(events: list[event_pb2.SessionEvent]) -> list[event_pb2.SessionEvent]:
    """Deltas may be merged differently per subscriber (docs/protocol.md, "Turns and events"); everything else is
    identical."""
    return [e for e in events if e.WhichOneof("event") not in ("assistant_delta", "reasoning_delta")]


async def hanging_stream_turn(
    stub: Stub, fake_model: FakeAnthropic, **attach: Any
) -> tuple[str, Bidi, run_session_api.CommandResult, HangReply]:
    """A new session and a stream attached to it (with `attach`) whose turn "turn" is in its model call: the first
    delta has arrived, the rest waits for the reply's release(). Returns the session id, the stream, the turn's
    command result and the reply."""
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid, **attach)
    bidi.turn("turn", "long task")
    started = await bidi.result("turn")
    await bidi.first_event(started.run_id, "assistant_delta")
    return sid, bidi, started, gate
