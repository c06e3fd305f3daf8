"""What a live subscriber receives is what a replay returns, byte for byte, under concurrent load: deltas are
numbered once, after coalescing, and nothing merges them later. The first delta of every content block is sent
on its own, never held back to merge with the next."""

from __future__ import annotations

import asyncio
from typing import Any

from general_agent.testing import FakeAnthropic, Reply, TextBlock, ThinkingBlock, text_deltas
from general_agent.v1 import event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import last_of
from tests.support.rpc import Stub, create_session, events_after, stream_turn

SESSIONS = 24
DELTAS = 1000


def wire(events: list[Any]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events]


async def watch_until_finished(stub: Stub, session_id: str) -> list[Any]:
    """A WatchSession follower from the start of an empty session: what the log does not have yet when it
    attaches arrives live."""
    call = stub.WatchSession(turn_api.WatchSessionRequest(session_id=session_id, after_sequence=0))
    out: list[Any] = []
    async for response in call:
        out.append(response.event)
        if response.event.WhichOneof("event") == "run_finished":
            call.cancel()
            break
    return out


async def one_session(stub: Stub, index: int) -> tuple[list[Any], list[Any], list[Any]]:
    session_id = (await create_session(stub, labels={"load": str(index)})).identity.session_id
    watcher = asyncio.create_task(watch_until_finished(stub, session_id))
    live = await stream_turn(stub, session_id, f"stream {index}")
    watched = await watcher
    session = (await stub.GetSession(session_api.GetSessionRequest(session_id=session_id))).session
    assert session.state == session_pb2.SESSION_STATE_IDLE
    return live, watched, await events_after(stub, session_id, 0, session.last_sequence)


async def test_live_streams_and_replays_carry_identical_events_under_load(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    fake_model.default_reply = text_deltas(DELTAS, "x ")
    results = await asyncio.gather(*(one_session(stub, i) for i in range(SESSIONS)))
    merged_somewhere = False
    for live, watched, replayed in results:
        assert last_of(live, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert "".join(e.assistant_delta.text for e in live) == "x " * DELTAS
        # The run's events, as streamed live to the turn's caller, to a watcher, and as replayed from the log.
        assert wire(live) == wire(replayed)
        assert wire(watched) == wire(replayed)
        deltas = [e.assistant_delta.text for e in live if e.WhichOneof("event") == "assistant_delta"]
        assert deltas[0] == "x ", "the first delta of a block is sent on its own"
        merged_somewhere = merged_somewhere or len(deltas) < DELTAS
    # Under this load, deltas do coalesce (otherwise the test would not exercise numbering after coalescing).
    assert merged_somewhere


async def test_the_first_delta_of_every_block_is_never_held(stub: Stub, fake_model: FakeAnthropic) -> None:
    session_id = (await create_session(stub)).identity.session_id
    reply = Reply(
        blocks=[
            ThinkingBlock("think " * 50, chunks=["think "] * 50),
            TextBlock("one " * 50, chunks=["one "] * 50),
        ]
    )
    fake_model.enqueue(reply)
    events = await stream_turn(stub, session_id, "go")
    reasoning = [e.reasoning_delta.text for e in events if e.WhichOneof("event") == "reasoning_delta"]
    text = [e.assistant_delta.text for e in events if e.WhichOneof("event") == "assistant_delta"]
    assert reasoning[0] == "think "
    assert text[0] == "one "
    assert "".join(reasoning) == "think " * 50
    assert "".join(text) == "one " * 50
