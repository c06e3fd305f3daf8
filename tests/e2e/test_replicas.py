"""Two real `general-agent serve` replicas on one store (docs/deployment.md, "Replicas"): any replica serves any
session; a replica SIGKILLed mid-run has the run marked interrupted by the other once its lease expires, and the
session goes on there; calls a killed replica left suspended are answered on the other at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import last_of, text_of
from tests.support.postgres import fresh_database
from tests.support.replicas import Replicas
from tests.support.rpc import (
    Stub,
    connect,
    create_session,
    events_after,
    get_session,
    read_until,
    stream_turn,
    text_input,
)
from tests.support.runs import start_hanging_run
from tests.support.subprocess_server import ServerProcesses

LOOKUP_SCHEMA = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The shared store: "" is the SQLite file of the shared state directory; otherwise a fresh database on the
    test session's PostgreSQL cluster (tests/support/postgres.py)."""
    if request.param == "sqlite":
        return ""
    return fresh_database(request.getfixturevalue("postgres_url"), "replicas")


@pytest.fixture
def replicas(server_processes: ServerProcesses, tmp_path: Path, store_url: str) -> Replicas:
    state = tmp_path / "shared-state"
    state.mkdir()
    return Replicas(processes=server_processes, state_dir=state, store_url=store_url)


async def turn_when_free(stub: Stub, session_id: str, text: str, timeout: float = 60.0) -> list[Any]:
    """A turn, retried while the session is SESSION_BUSY (a dead replica's lease has not expired yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await stream_turn(stub, session_id, text)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


async def test_a_session_created_on_one_replica_turns_on_the_other(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    a, b = replicas.make("replica-a"), replicas.make("replica-b")
    address_a, address_b = a.start(), b.start()
    async with connect(address_a) as stub_a, connect(address_b) as stub_b:
        sid = (await create_session(stub_a, system_prompt="be brief")).identity.session_id
        fake_model_thread.enqueue(TextReply("hello from b"), TextReply("hello from a"))
        assert text_of(await stream_turn(stub_b, sid, "hi b")) == "hello from b"
        assert text_of(await stream_turn(stub_a, sid, "hi a")) == "hello from a"
        assert [m["role"] for m in fake_model_thread.requests[-1].messages] == ["user", "assistant", "user"]
        on_b = await get_session(stub_b, sid)
        assert on_b.history_message_count == 4
        assert on_b.last_sequence == (await get_session(stub_a, sid)).last_sequence


async def test_a_replica_killed_mid_run_has_its_run_marked_interrupted_and_the_session_continues(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    a, b = replicas.make("replica-a"), replicas.make("replica-b")
    address_a, address_b = a.start(), b.start()
    async with connect(address_a) as stub_a, connect(address_b) as stub_b:
        sid = (await create_session(stub_a)).identity.session_id
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task")
        assert (await get_session(stub_b, sid)).state == session_pb2.SESSION_STATE_RUNNING
        a.kill()
        run.call.cancel()
        run.reply.release()

        fake_model_thread.enqueue(TextReply("carrying on"))
        events = await turn_when_free(stub_b, sid, "still there?")
        assert text_of(events) == "carrying on"
        log = await events_after(stub_b, sid, 0, events[-1].sequence)
        finished = [e for e in log if e.WhichOneof("event") == "run_finished"]
        assert [(f.run_id, f.run_finished.outcome, f.run_finished.reason) for f in finished] == [
            (run.run_id, event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_INTERRUPTED),
            (events[0].run_id, event_pb2.RUN_OUTCOME_COMPLETED, event_pb2.RUN_REASON_UNSPECIFIED),
        ]
        # Sequences A sent before it died are never reused.
        assert finished[0].sequence > max(e.sequence for e in run.seen)
        assert (await get_session(stub_b, sid)).state == session_pb2.SESSION_STATE_IDLE


async def test_calls_a_killed_replica_left_pending_complete_on_the_other_at_once(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    replicas.lease_ttl = 600.0  # the submit must not wait for any lease: a suspended session has no owner
    a, b = replicas.make("replica-a"), replicas.make("replica-b")
    address_a, address_b = a.start(), b.start()
    ids = ["toolu_1", "toolu_2"]
    fake_model_thread.enqueue(
        Reply(
            blocks=[TextBlock("Looking up."), *(ToolUseBlock(id=i, name="lookup", input={"q": i}) for i in ids)],
            stop_reason="tool_use",
        ),
        TextReply("Both answered."),
    )
    async with connect(address_a) as stub_a, connect(address_b) as stub_b:
        lookup = hosted_tool_pb2.HostedToolDefinition(name="lookup", input_schema_json=LOOKUP_SCHEMA)
        sid = (await create_session(stub_a, hosted_tools=[lookup])).identity.session_id
        first = await stream_turn(stub_a, sid, "look both up")
        assert last_of(first, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        a.kill()

        streams = []
        for call_id in ids:
            request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id=call_id, output_json='"42"')
            streams.append([r.event async for r in stub_b.SubmitHostedToolResult(request)])
        final = streams[-1]
        assert text_of(final) == "Both answered."
        assert last_of(final, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert final[0].run_id == first[0].run_id
        assert last_of(streams[0], "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        request_messages = fake_model_thread.requests[-1].messages
        assert [m["role"] for m in request_messages] == ["user", "assistant", "user"]
        assert [b["tool_use_id"] for b in request_messages[-1]["content"]] == ids


@asynccontextmanager
async def one_session_on_two_replicas(replicas: Replicas) -> AsyncIterator[tuple[Stub, Stub, str]]:
    """Replicas A and B started, a stub for each, and a session created on A."""
    a, b = replicas.make("replica-a"), replicas.make("replica-b")
    address_a, address_b = a.start(), b.start()
    async with connect(address_a) as stub_a, connect(address_b) as stub_b:
        yield stub_a, stub_b, (await create_session(stub_a)).identity.session_id


async def test_stop_and_cancel_on_one_replica_reach_the_run_on_the_other(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    async with one_session_on_two_replicas(replicas) as (stub_a, stub_b, sid):
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task")
        stopped = await stub_b.RequestStop(turn_api.RequestStopRequest(session_id=sid))
        assert stopped.run_id == run.run_id
        finished = last_of(await run.rest(), "run_finished")
        assert (finished.outcome, finished.reason) == (
            event_pb2.RUN_OUTCOME_STOPPED,
            event_pb2.RUN_REASON_STOP_REQUESTED,
        )
        assert (await stub_b.ClearStop(turn_api.ClearStopRequest(session_id=sid))).was_set is True

        run = await start_hanging_run(stub_a, fake_model_thread, sid, "another long task")
        cancelled = await stub_b.CancelRun(turn_api.CancelRunRequest(session_id=sid, run_id=run.run_id))
        assert (cancelled.cancelled, cancelled.run_id) == (True, run.run_id)
        finished = last_of(await run.rest(), "run_finished")
        assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
        assert (await get_session(stub_b, sid)).state == session_pb2.SESSION_STATE_IDLE


async def test_a_message_injected_on_one_replica_reaches_the_run_on_the_other(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    async with one_session_on_two_replicas(replicas) as (stub_a, stub_b, sid):
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task", then=[TextReply("X it is.")])
        request = turn_api.InjectMessageRequest(session_id=sid, input=text_input("mention X"), request_id="inj-1")
        injected = await stub_b.InjectMessage(request)
        assert (injected.accepted, injected.run_id) == (True, run.run_id)
        assert await stub_b.InjectMessage(request) == injected  # an idempotent retry answers the same
        run.reply.release()
        events = await run.rest()
        assert [e.WhichOneof("event") for e in events].count("message_injected") == 1
        assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert fake_model_thread.requests[-1].messages[-1]["content"][0]["text"] == "mention X"


def wire(events: list[Any]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events]


async def watch_runs(stub: Stub, session_id: str, runs: int) -> list[Any]:
    """WatchSession from the start of the session until `runs` run_finished events have arrived."""
    call = stub.WatchSession(turn_api.WatchSessionRequest(session_id=session_id, after_sequence=0))
    out: list[Any] = []
    async for response in call:
        out.append(response.event)
        if [e.WhichOneof("event") for e in out].count("run_finished") == runs:
            call.cancel()
            break
    return out


async def test_a_watch_on_one_replica_follows_runs_on_the_other_event_for_event(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    async with one_session_on_two_replicas(replicas) as (stub_a, stub_b, sid):
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task")
        # Attached mid-run on B: what the log has is replayed, the rest arrives live from A's run, then A's next
        # run on the (by then idle) session too.
        watch_b = asyncio.create_task(watch_runs(stub_b, sid, 2))
        watch_a = asyncio.create_task(watch_runs(stub_a, sid, 2))
        await asyncio.sleep(0)
        run.reply.release()
        first = [*run.seen, *await run.rest()]
        fake_model_thread.enqueue(TextReply("second answer", chunks=["second ", "answer"]))
        second = await stream_turn(stub_a, sid, "again")
        on_b, on_a = await asyncio.wait_for(watch_b, 30), await asyncio.wait_for(watch_a, 30)
        assert wire(on_b) == wire(on_a) == wire(first + second)
        assert wire(on_b) == wire(await events_after(stub_b, sid, 0, second[-1].sequence))


def busy_turn(stub: Stub, session_id: str, text: str, policy: Any) -> asyncio.Task[list[Any]]:
    """A StreamTurn with a busy policy, read up to its run_finished in the background."""
    options = turn_api.TurnOptions(busy_policy=policy)
    call = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=session_id, input=text_input(text), options=options))
    return asyncio.create_task(read_until(call, "run_finished"))


async def injected(stub: Stub, session_id: str) -> bool:
    """Whether the session's history has an injected (steering) message yet."""
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=session_id))
    return any(e.WhichOneof("entry") == "message" and e.message.injected for e in history.entries)


async def test_a_steer_turn_on_one_replica_steers_and_follows_the_run_on_the_other(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    async with one_session_on_two_replicas(replicas) as (stub_a, stub_b, sid):
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task", then=[TextReply("Focused on Y.")])
        steering = busy_turn(stub_b, sid, "focus on Y", turn_api.BUSY_POLICY_STEER)
        deadline = time.monotonic() + 30
        while not await injected(stub_a, sid):  # the steering message is committed by A (polled, bounded)
            assert time.monotonic() < deadline, "the steering message never reached the run"
            await asyncio.sleep(0.05)
        run.reply.release()
        on_a = [*run.seen, *await run.rest()]
        steered = await asyncio.wait_for(steering, 30)
        assert {e.run_id for e in steered} == {run.run_id}
        assert "run_started" not in [e.WhichOneof("event") for e in steered]
        assert [p.text.text for p in last_of(steered, "message_injected").input] == ["focus on Y"]
        assert wire(steered) == wire([e for e in on_a if e.sequence >= steered[0].sequence])


async def test_a_disconnect_cancels_the_run_its_stream_started_and_no_other_across_replicas(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    """on_disconnect CANCEL (the default) stops the runs a stream started, wherever the session is followed: a
    STEER follower on B that goes away leaves A's run going; the StreamTurn that started a run on A going away
    stops it CANCELLED, as a watcher on B sees, and the session is usable from B at once."""
    async with one_session_on_two_replicas(replicas) as (stub_a, stub_b, sid):
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task", then=[TextReply("Focused.")])
        options = turn_api.TurnOptions(busy_policy=turn_api.BUSY_POLICY_STEER)
        request = turn_api.StreamTurnRequest(session_id=sid, input=text_input("focus"), options=options)
        follower = stub_b.StreamTurn(request)
        deadline = time.monotonic() + 30
        while not await injected(stub_a, sid):  # the steering message is committed by A (polled, bounded)
            assert time.monotonic() < deadline, "the steering message never reached the run"
            await asyncio.sleep(0.05)
        follower.cancel()
        run.reply.release()
        finished = last_of(await run.rest(), "run_finished")
        assert finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert fake_model_thread.requests[-1].messages[-1]["content"][0]["text"] == "focus"

        run = await start_hanging_run(stub_a, fake_model_thread, sid, "another long task")
        watch = stub_b.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=run.seen[-1].sequence))
        run.call.cancel()
        seen_on_b = await asyncio.wait_for(read_until(watch, "run_finished"), 30)
        watch.cancel()
        finished = last_of(seen_on_b, "run_finished")
        assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_STOPPED, event_pb2.RUN_REASON_CANCELLED)
        assert {e.run_id for e in seen_on_b} == {run.run_id}
        assert (await get_session(stub_b, sid)).state == session_pb2.SESSION_STATE_IDLE
        fake_model_thread.enqueue(TextReply("still usable"))
        assert text_of(await stream_turn(stub_b, sid, "again")) == "still usable"


async def test_an_enqueued_turn_on_one_replica_runs_after_the_run_on_the_other(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    a, b = replicas.make("replica-a"), replicas.make("replica-b")
    async with connect(a.start()) as stub_a, connect(b.start()) as stub_b:
        sid = (await create_session(stub_a)).identity.session_id
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task", then=[TextReply("queued answer")])
        waiting = busy_turn(stub_b, sid, "next", turn_api.BUSY_POLICY_ENQUEUE)
        deadline = time.monotonic() + 30
        while f"turn queued behind run {run.run_id}" not in b.log():  # B has seen A's run (polled, bounded)
            assert time.monotonic() < deadline, "the enqueued turn never waited for the run"
            await asyncio.sleep(0.05)
        run.reply.release()
        first = [*run.seen, *await run.rest()]
        second = await asyncio.wait_for(waiting, 30)
        assert text_of(second) == "queued answer"
        assert second[0].run_id != run.run_id
        assert second[0].sequence > first[-1].sequence
        assert second[0].run_started.trigger == event_pb2.RUN_TRIGGER_ENQUEUED_TURN
