"""RunSession (docs/protocol.md, "Watching and RunSession") end to end: the bidirectional protocol driven by a
queue-backed request iterator, so each test decides exactly when a command is sent and when the client half-closes."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

import grpc
import pytest

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextBlock, TextReply, ToolUseBlock, text_deltas
from general_agent.v1 import event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of, sequences, text_of
from tests.support.rpc import (
    Stub,
    connect,
    create_session,
    decode_error,
    decode_status,
    events_after,
    get_session,
    stream_turn,
    text_input,
    wait_idle,
)
from tests.support.runs import hang, start_hanging_run

READ_TIMEOUT = 10.0

TEXT_RUN = ["run_started", "assistant_delta", "usage_snapshot", "turn_complete", "run_finished"]

LOOKUP_SCHEMA_JSON = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


# ---------------------------------------------------------------------- helpers


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


# ---------------------------------------------------------------------- protocol errors


async def test_first_message_must_be_attach(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    bidi = Bidi(stub)
    bidi.turn("c1", "hello")
    error = await rpc_failure(bidi)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violations
    assert error.field_violations[0][0] == "attach"
    assert fake_model.requests == []
    assert (await get_session(stub, sid)).last_sequence == 0


async def test_stream_ending_before_attach_is_invalid_argument(stub: Stub) -> None:
    bidi = Bidi(stub)
    bidi.close()
    error = await rpc_failure(bidi)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_attach_to_unknown_session_is_not_found(stub: Stub) -> None:
    bidi = await open_bidi(stub, "no-such-session")
    error = await rpc_failure(bidi)
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    assert error.metadata == {"session_id": "no-such-session"}


# ---------------------------------------------------------------------- turns


async def test_attach_then_turn_streams_the_run(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("Hello there", chunks=["Hello", " there"]))
    bidi = await open_bidi(stub, sid)
    bidi.turn("cmd-1", "hi", request_id="rs-turn-1")
    result = await bidi.result("cmd-1")
    assert result.status.code == 0
    assert result.run_id
    finished = await bidi.finished(result.run_id)
    events = bidi.events()
    assert kinds(events) == TEXT_RUN
    assert all(e.run_id == result.run_id and e.session_id == sid for e in events)
    assert_strictly_increasing(events)
    assert events[0].run_started.trigger == event_pb2.RUN_TRIGGER_TURN
    assert events[0].run_started.request_id == "rs-turn-1"
    assert text_of(events) == "Hello there"
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert fake_model.requests[0].messages[0]["content"][0]["text"] == "hi"
    session = await get_session(stub, sid)
    assert session.last_sequence == finished.sequence
    assert session.state == session_pb2.SESSION_STATE_IDLE
    bidi.close()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK


async def test_several_turns_on_one_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("one"), TextReply("two"), TextReply("three"))
    bidi = await open_bidi(stub, sid)
    run_ids = []
    for index, word in enumerate(("first", "second", "third")):
        bidi.turn(f"t{index}", word)
        result = await bidi.result(f"t{index}")
        assert result.status.code == 0, result.status
        finished = await bidi.finished(result.run_id)
        assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
        run_ids.append(result.run_id)
    assert len(set(run_ids)) == 3
    for run_id, text in zip(run_ids, ("one", "two", "three"), strict=True):
        assert kinds(bidi.events(run_id)) == TEXT_RUN
        assert text_of(bidi.events(run_id)) == text
    assert_strictly_increasing(bidi.events())
    # The third model call carries the whole conversation.
    assert [m["role"] for m in fake_model.requests[2].messages] == ["user", "assistant", "user", "assistant", "user"]
    assert fake_model.requests[2].last_user_text == "third"
    bidi.close()
    await bidi.drain()


async def test_busy_turn_is_a_command_result_and_the_stream_goes_on(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate, TextReply("later"))
    bidi = await open_bidi(stub, sid)
    bidi.turn("long", "long task")
    first = await bidi.result("long")
    bidi.turn("busy", "me too")
    busy = await bidi.result("busy")
    assert busy.status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert decode_status(busy.status).reason == "SESSION_BUSY"
    assert busy.run_id == ""
    gate.release()
    await bidi.finished(first.run_id)
    bidi.turn("after", "now")
    after = await bidi.result("after")
    assert after.status.code == 0
    assert (await bidi.finished(after.run_id)).run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    bidi.close()
    await bidi.drain()


async def test_invalid_turn_input_is_a_command_result(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    bidi = await open_bidi(stub, sid)
    bidi.send(turn=run_session_api.RunSessionTurn(command_id="empty"))
    rejected = await bidi.result("empty")
    assert rejected.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert rejected.run_id == ""
    bidi.turn("ok", "hi")
    ok = await bidi.result("ok")
    assert ok.status.code == 0
    await bidi.finished(ok.run_id)
    assert len(fake_model.requests) == 1
    bidi.close()
    await bidi.drain()


# ---------------------------------------------------------------------- hosted tools


async def test_hosted_tool_round_over_the_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(
        Reply(blocks=[TextBlock("Asking."), ToolUseBlock(id="toolu_h1", name="lookup", input={"q": "weather"})]),
        TextReply("It is sunny."),
    )
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "weather?")
    started = await bidi.result("turn")
    suspended = await bidi.finished(started.run_id, terminal=False)
    assert suspended.run_finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    assert list(suspended.run_finished.pending_call_ids) == ["toolu_h1"]
    hosted = last_of(bidi.events(), "hosted_tool_call")
    assert (hosted.call_id, hosted.tool_name, hosted.input_json) == ("toolu_h1", "lookup", '{"q":"weather"}')
    assert (await get_session(stub, sid)).state == session_pb2.SESSION_STATE_SUSPENDED
    mark = len(bidi.log)
    bidi.send(
        hosted_result=run_session_api.RunSessionHostedResult(
            command_id="res", call_id="toolu_h1", output_json='"sunny, 21 C"'
        )
    )
    resolved = await bidi.result("res")
    assert resolved.status.code == 0
    assert resolved.run_id == started.run_id
    finished = await bidi.finished(started.run_id, start=mark)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    continued = [r.event for r in bidi.log[mark:] if r.WhichOneof("response") == "event"]
    assert kinds(continued) == [
        "tool_result",
        "turn_complete",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    assert all(e.run_id == started.run_id for e in continued)
    assert continued[0].tool_result.call_id == "toolu_h1"
    assert text_of(continued) == "It is sunny."
    assert_strictly_increasing(bidi.events())
    tool_result = fake_model.requests[1].messages[-1]["content"][0]
    assert (tool_result["type"], tool_result["tool_use_id"], tool_result["content"]) == (
        "tool_result",
        "toolu_h1",
        "sunny, 21 C",
    )
    assert (await get_session(stub, sid)).state == session_pb2.SESSION_STATE_IDLE
    bidi.close()
    await bidi.drain()


async def test_hosted_result_for_an_unknown_call_is_a_command_result(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    bidi = await open_bidi(stub, sid)
    bidi.send(
        hosted_result=run_session_api.RunSessionHostedResult(command_id="bad", call_id="toolu_nope", output_json="1")
    )
    rejected = await bidi.result("bad")
    assert rejected.status.code == grpc.StatusCode.NOT_FOUND.value[0]
    info = decode_status(rejected.status)
    assert (info.reason, info.domain) == ("UNKNOWN_TOOL_CALL", "general-agent")
    assert info.metadata["call_id"] == "toolu_nope"
    # A hosted_result without any result is rejected the same way (decode error), and the stream goes on.
    bidi.send(hosted_result=run_session_api.RunSessionHostedResult(command_id="empty", call_id="toolu_nope"))
    assert (await bidi.result("empty")).status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    fake_model.enqueue(TextReply("still here"))
    bidi.turn("later", "hello?")
    later = await bidi.result("later")
    assert later.status.code == 0
    finished = await bidi.finished(later.run_id)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(bidi.events(later.run_id)) == "still here"
    bidi.close()
    await bidi.drain()


# ---------------------------------------------------------------------- steering, stop, cancel


async def test_inject_while_running(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate, TextReply("steered answer"))
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "long task")
    started = await bidi.result("turn")
    await fake_model.wait_for_requests(1)
    bidi.send(inject=run_session_api.RunSessionInject(command_id="steer", input=text_input("also mention cats")))
    injected = await bidi.result("steer")
    assert injected.status.code == 0
    assert injected.accepted is True
    assert injected.run_id == started.run_id
    gate.release()
    finished = await bidi.finished(started.run_id)
    assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    events = bidi.events(started.run_id)
    assert kinds(events) == [
        "run_started",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "message_injected",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    message = last_of(events, "message_injected")
    assert [p.text.text for p in message.input] == ["also mention cats"]
    assert len(fake_model.requests) == 2
    assert fake_model.requests[1].last_user_text == "also mention cats"
    assert [m["role"] for m in fake_model.requests[1].messages] == ["user", "assistant", "user"]
    # Inject while idle: not accepted, nothing written.
    before = (await get_session(stub, sid)).last_sequence
    bidi.send(inject=run_session_api.RunSessionInject(command_id="idle", input=text_input("too late")))
    idle = await bidi.result("idle")
    assert (idle.status.code, idle.accepted, idle.run_id) == (0, False, "")
    assert (await get_session(stub, sid)).last_sequence == before
    bidi.close()
    await bidi.drain()


async def test_commands_of_one_stream_apply_in_order(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid)
    # Sent back to back, without waiting: the inject and the stop find the run the turn started.
    bidi.turn("turn", "long task")
    bidi.send(inject=run_session_api.RunSessionInject(command_id="steer", input=text_input("steer")))
    bidi.send(stop=run_session_api.RunSessionStop(command_id="stop"))
    bidi.send(clear_stop=run_session_api.RunSessionClearStop(command_id="clear"))
    started = await bidi.result("turn")
    steer = await bidi.result("steer")
    assert (steer.status.code, steer.accepted, steer.run_id) == (0, True, started.run_id)
    stop = await bidi.result("stop")
    assert (stop.status.code, stop.run_id) == (0, started.run_id)
    cleared = await bidi.result("clear")
    assert (cleared.status.code, cleared.accepted) == (0, True)
    finished = await bidi.finished(started.run_id)
    assert finished.run_finished.reason == event_pb2.RUN_REASON_STOP_REQUESTED
    results = [r.command_result.command_id for r in bidi.log if r.WhichOneof("response") == "command_result"]
    assert results == ["turn", "steer", "stop", "clear"]
    assert (await get_session(stub, sid)).stop_requested is False
    gate.release()
    bidi.close()
    await bidi.drain()


async def test_stop_command_then_clear_stop(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, bidi, started, _ = await hanging_stream_turn(stub, fake_model)
    bidi.send(stop=run_session_api.RunSessionStop(command_id="stop"))
    stopped = await bidi.result("stop")
    assert stopped.status.code == 0
    assert stopped.run_id == started.run_id
    finished = await bidi.finished(started.run_id)
    assert (finished.run_finished.outcome, finished.run_finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_STOP_REQUESTED,
    )
    assert await fake_model.requests[0].disconnected.wait(timeout=5)
    assert (await get_session(stub, sid)).stop_requested is True
    # The flag is sticky: the next turn ends at once without calling the model.
    bidi.turn("blocked", "again")
    blocked = await bidi.result("blocked")
    assert blocked.status.code == 0
    blocked_end = await bidi.finished(blocked.run_id)
    assert kinds(bidi.events(blocked.run_id)) == ["run_started", "turn_complete", "run_finished"]
    assert blocked_end.run_finished.reason == event_pb2.RUN_REASON_STOP_REQUESTED
    assert len(fake_model.requests) == 1
    bidi.send(clear_stop=run_session_api.RunSessionClearStop(command_id="clear"))
    cleared = await bidi.result("clear")
    assert (cleared.status.code, cleared.accepted) == (0, True)
    assert (await get_session(stub, sid)).stop_requested is False
    fake_model.enqueue(TextReply("free again"))
    bidi.turn("free", "go")
    free = await bidi.result("free")
    assert (await bidi.finished(free.run_id)).run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(bidi.events(free.run_id)) == "free again"
    bidi.close()
    await bidi.drain()


async def test_cancel_command(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, bidi, started, _ = await hanging_stream_turn(stub, fake_model)
    # A run id that is not the active run cancels nothing.
    bidi.send(cancel=run_session_api.RunSessionCancel(command_id="wrong", run_id="not-this-run"))
    wrong = await bidi.result("wrong")
    assert (wrong.status.code, wrong.run_id) == (0, "")
    bidi.send(cancel=run_session_api.RunSessionCancel(command_id="cancel", run_id=started.run_id))
    cancelled = await bidi.result("cancel")
    assert cancelled.status.code == 0
    assert cancelled.run_id == started.run_id
    finished = await bidi.finished(started.run_id)
    assert (finished.run_finished.outcome, finished.run_finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_CANCELLED,
    )
    assert last_of(bidi.events(started.run_id), "turn_complete").stop_reason == event_pb2.STOP_REASON_ABORTED
    session = await get_session(stub, sid)
    assert session.stop_requested is False  # cancel is not sticky
    assert session.state == session_pb2.SESSION_STATE_IDLE
    fake_model.enqueue(TextReply("next"))
    bidi.turn("next", "again")
    nxt = await bidi.result("next")
    assert (await bidi.finished(nxt.run_id)).run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    bidi.close()
    await bidi.drain()


async def test_ping_answers_a_heartbeat_with_the_last_sequence(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    prior = await stream_turn(stub, sid, "before")
    bidi = await open_bidi(stub, sid)  # live only: nothing is replayed
    bidi.send(ping=run_session_api.RunSessionPing())
    heartbeat = await bidi.wait(lambda r: r.WhichOneof("response") == "heartbeat")
    assert heartbeat.heartbeat.last_sequence == prior[-1].sequence
    assert bidi.summary() == ["heartbeat"]
    bidi.turn("t", "now")
    result = await bidi.result("t")
    finished = await bidi.finished(result.run_id)
    bidi.send(ping=run_session_api.RunSessionPing())
    start = len(bidi.log)
    second = await bidi.wait(lambda r: r.WhichOneof("response") == "heartbeat", start)
    assert second.heartbeat.last_sequence == finished.sequence
    bidi.close()
    await bidi.drain()


# ---------------------------------------------------------------------- attach cursor and other clients


async def test_attach_after_zero_replays_then_follows_live(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("first answer"))
    earlier = await stream_turn(stub, sid, "one")
    # A run that is in flight while the stream attaches: part of it is in the log, the rest arrives live.
    other = await start_hanging_run(stub, fake_model, sid, "two")
    bidi = await open_bidi(stub, sid, after_sequence=0)
    await bidi.first_event(other.run_id, "assistant_delta")
    other.reply.release()
    rest = await other.rest()
    await bidi.finished(other.run_id)
    fake_model.enqueue(TextReply("third answer"))
    bidi.turn("three", "three")
    third = await bidi.result("three")
    await bidi.finished(third.run_id)
    received = bidi.events()
    assert_strictly_increasing(received)
    # Earlier events first (deltas may be merged differently on a live stream than in the log).
    replayed = [e for e in received if e.sequence <= earlier[-1].sequence]
    assert received[: len(replayed)] == replayed
    assert without_deltas(replayed) == without_deltas(earlier)
    assert text_of(replayed) == text_of(earlier)
    assert received[0].sequence == 1
    log = await events_after(stub, sid, 0, received[-1].sequence)
    assert without_deltas(received) == without_deltas(log)
    assert text_of(received) == text_of(log) == "first answer" + "partial rest" + "third answer"
    assert text_of(bidi.events(other.run_id)) == text_of(other.seen + rest)
    bidi.close()
    await bidi.drain()


async def test_attach_after_a_middle_sequence(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("a"), TextReply("b"))
    first = await stream_turn(stub, sid, "one")
    second = await stream_turn(stub, sid, "two")
    bidi = await open_bidi(stub, sid, after_sequence=first[-1].sequence)
    await bidi.finished(second[0].run_id)
    assert bidi.events() == second
    bidi.close()
    await bidi.drain()


async def test_events_of_another_client_reach_the_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    bidi = await open_bidi(stub, sid)
    bidi.send(ping=run_session_api.RunSessionPing())  # once answered, the stream is surely attached
    await bidi.wait(lambda r: r.WhichOneof("response") == "heartbeat")
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="toolu_x", name="lookup", input={"q": "x"})]),
        TextReply("done by the other client"),
    )
    theirs = await stream_turn(stub, sid, "from elsewhere")
    run_id = theirs[0].run_id
    await bidi.finished(run_id, terminal=False)
    assert without_deltas(bidi.events(run_id)) == without_deltas(theirs)
    # The other client resolves the call; this stream still sees the continuation...
    submitted = [
        r.event
        async for r in stub.SubmitHostedToolResult(
            turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_x", output_json='"ok"')
        )
    ]
    await bidi.finished(run_id)
    mine = bidi.events(run_id)
    assert without_deltas(mine) == without_deltas(theirs + submitted)
    assert text_of(mine) == "done by the other client"
    # ...and this stream never receives a command_result for commands it did not send.
    assert "command_result" not in bidi.summary()
    bidi.close()
    await bidi.drain()


async def test_two_streams_on_one_session_see_each_others_runs(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    a = await open_bidi(stub, sid)
    b = await open_bidi(stub, sid)
    for bidi in (a, b):
        bidi.send(ping=run_session_api.RunSessionPing())
        await bidi.wait(lambda r: r.WhichOneof("response") == "heartbeat")
    fake_model.enqueue(TextReply("from a"), TextReply("from b"))
    a.turn("a1", "a")
    run_a = (await a.result("a1")).run_id
    await b.finished(run_a)
    b.turn("b1", "b")
    run_b = (await b.result("b1")).run_id
    await a.finished(run_b)
    await a.finished(run_a)
    await b.finished(run_b)
    assert without_deltas(a.events()) == without_deltas(b.events())
    assert text_of(a.events()) == text_of(b.events()) == "from afrom b"
    for bidi in (a, b):
        bidi.close()
        await bidi.drain()


# ---------------------------------------------------------------------- half-close and disconnect


async def test_half_close_keeps_sending_until_the_run_finishes(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(stub)).identity.session_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "long task")
    bidi.close()
    await bidi.half_closed.wait()
    started = await bidi.result("turn")
    await fake_model.wait_for_requests(1)
    gate.release()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    events = bidi.events()
    assert kinds(events) == TEXT_RUN
    assert events[-1].run_id == started.run_id
    assert events[-1].run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(events) == "partial rest"


async def test_half_close_ends_at_a_suspension(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_s", name="lookup", input={"q": "s"})]))
    bidi = await open_bidi(stub, sid)
    bidi.turn("turn", "ask")
    bidi.close()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    last = bidi.events()[-1]
    assert last.run_finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    # The suspended run is not cancelled by the stream's end.
    session = await get_session(stub, sid)
    assert session.state == session_pb2.SESSION_STATE_SUSPENDED
    assert list(session.pending_call_ids) == ["toolu_s"]


async def test_half_close_without_runs_ends_the_stream(stub: Stub) -> None:
    sid = (await create_session(stub)).identity.session_id
    bidi = await open_bidi(stub, sid)
    bidi.send(ping=run_session_api.RunSessionPing())
    bidi.close()
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    assert bidi.summary() == ["heartbeat"]


async def test_delete_session_ends_an_attached_stream(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, bidi, started, gate = await hanging_stream_turn(
        stub, fake_model, on_disconnect=turn_api.ON_DISCONNECT_CONTINUE
    )
    await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))
    finished = await bidi.finished(started.run_id)
    assert (finished.run_finished.outcome, finished.run_finished.reason) == (
        event_pb2.RUN_OUTCOME_STOPPED,
        event_pb2.RUN_REASON_SESSION_DELETED,
    )
    # The session is gone, so is the stream (it does not linger on a forgotten session).
    await bidi.drain()
    assert await bidi.call.code() == grpc.StatusCode.OK
    assert bidi.events()[-1] == finished
    gate.release()


async def test_client_cancel_stops_a_run_the_stream_continued(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_c", name="lookup", input={"q": "c"})]))
    suspended = await stream_turn(stub, sid, "ask")
    run_id = suspended[0].run_id
    gate = hang()
    fake_model.enqueue(gate)
    bidi = await open_bidi(stub, sid, on_disconnect=turn_api.ON_DISCONNECT_CANCEL)
    bidi.send(
        hosted_result=run_session_api.RunSessionHostedResult(command_id="res", call_id="toolu_c", output_json='"c"')
    )
    assert (await bidi.result("res")).status.code == 0
    await bidi.first_event(run_id, "assistant_delta")
    bidi.cancel()
    session = await wait_idle(stub, sid)
    log = await events_after(stub, sid, 0, session.last_sequence)
    finished = last_of(log, "run_finished")
    assert log[-1].run_id == run_id
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
    gate.release()


async def _cancel_mid_run(stub: Stub, fake_model: FakeAnthropic, on_disconnect: int) -> tuple[str, str, HangReply]:
    sid, bidi, started, gate = await hanging_stream_turn(stub, fake_model, on_disconnect=on_disconnect)
    bidi.cancel()
    return sid, started.run_id, gate


async def test_client_cancel_with_cancel_policy_stops_the_run(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid, run_id, gate = await _cancel_mid_run(stub, fake_model, turn_api.ON_DISCONNECT_CANCEL)
    session = await wait_idle(stub, sid)
    assert await fake_model.requests[0].disconnected.wait(timeout=5)
    log = await events_after(stub, sid, 0, session.last_sequence)
    finished = last_of(log, "run_finished")
    assert log[-1].run_id == run_id
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
    gate.release()
    fake_model.enqueue(TextReply("usable"))
    assert text_of(await stream_turn(stub, sid, "next")) == "usable"


async def test_client_cancel_with_continue_policy_keeps_the_run(
    server: RunningServer, stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid, run_id, gate = await _cancel_mid_run(stub, fake_model, turn_api.ON_DISCONNECT_CONTINUE)
    # Wait until the server has noticed the disconnect (the stream's subscription is gone) before releasing.
    actor = server.agent.cache.peek("default", sid)
    assert actor is not None
    for _ in range(500):
        if not actor.ledger.has_subscribers:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the RunSession handler did not end after the client cancelled")
    assert actor.run is not None
    assert actor.run.run_id == run_id
    gate.release()
    session = await wait_idle(stub, sid)
    log = await events_after(stub, sid, 0, session.last_sequence)
    finished = last_of(log, "run_finished")
    assert log[-1].run_id == run_id
    assert finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert text_of(log) == "partial rest"
    assert not fake_model.requests[0].disconnected.is_set()


async def test_a_result_sent_right_after_attach_on_a_restarted_server_streams_every_event(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    """The attach replays from its cursor while the result continues the run: every event after the cursor
    reaches the stream once, in order, whatever the timing (no pause between attach and the command)."""
    state = tmp_path / "restart-state"
    server = await server_factory(state_dir=state)
    for attempt in range(6):
        async with connect(server.address) as stub:
            sid = await hosted_session(stub)
            fake_model.enqueue(
                Reply(blocks=[ToolUseBlock(id=f"toolu_{attempt}", name="lookup", input={"q": "x"})]),
                text_deltas(200, "w "),
            )
            suspended = await stream_turn(stub, sid, "look it up")
            cursor = suspended[-1].sequence
        await server.stop(grace=1.0)
        server = await server_factory(state_dir=state)
        async with connect(server.address) as stub:
            bidi = await open_bidi(stub, sid, after_sequence=cursor)
            bidi.send(
                hosted_result=run_session_api.RunSessionHostedResult(
                    command_id="res", call_id=f"toolu_{attempt}", output_json='"found"'
                )
            )
            finished = await bidi.finished(suspended[0].run_id)
            assert finished.run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
            streamed = bidi.events()
            assert text_of(streamed) == "w " * 200, f"attempt {attempt}: {kinds(streamed)}"
            logged = await events_after(stub, sid, cursor, finished.sequence)
            assert [e.SerializeToString(deterministic=True) for e in streamed] == [
                e.SerializeToString(deterministic=True) for e in logged
            ]
            bidi.close()
            await bidi.drain()
