"""RunSession's attach cursor and other clients: replay from a sequence then live events, the runs of other
clients and streams reaching the stream, and a result sent right after attaching on a restarted server."""

from __future__ import annotations

from pathlib import Path

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock, text_deltas
from general_agent.v1 import event_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.bidi import assert_strictly_increasing, hosted_session, open_bidi, without_deltas
from tests.support.events import kinds, text_of
from tests.support.rpc import Stub, connect, create_session, events_after, stream_turn
from tests.support.runs import start_hanging_run

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
