"""A watcher that stops reading: its bounded buffer (subscriber_buffer events) overflows while the run goes on,
and its stream ends RESOURCE_EXHAUSTED `SLOW_CONSUMER` naming the last sequence it was given, so it can
reconnect from there. The run and a watcher that keeps reading are not held up by it."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from general_agent.testing import FakeAnthropic, text_deltas
from general_agent.v1 import agent_service_pb2_grpc
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import kinds
from tests.support.rpc import create_session, events_after, rpc_error, stream_turn

BUFFER = 8
DELTAS = 600
DELTA = "x" * 4096  # 2.4 MB of deltas: far past what the HTTP/2 windows and socket buffers hold
# The client's receive window stays at its default: it does not grow for a stream nobody reads.
NO_WINDOW_GROWTH = [("grpc.http2.bdp_probe", 0)]


async def read_to(call: Any, sequence: int) -> list[int]:
    """Reads a WatchSession call up to and including `sequence`; the sequences read."""
    read: list[int] = []
    async for response in call:
        read.append(response.event.sequence)
        if response.event.sequence >= sequence:
            return read
    raise AssertionError(f"the stream ended before sequence {sequence}")


async def test_a_watcher_that_stops_reading_is_cut_off_without_slowing_the_run(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory({"GENERAL_AGENT_SUBSCRIBER_BUFFER": str(BUFFER)})
    async with (
        grpc.aio.insecure_channel(server.address) as channel,
        grpc.aio.insecure_channel(server.address, options=NO_WINDOW_GROWTH) as slow_channel,
    ):
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        slow_stub = agent_service_pb2_grpc.AgentServiceStub(slow_channel)
        sid = (await create_session(stub)).identity.session_id
        first = (await stream_turn(stub, sid, "hi"))[-1].sequence
        slow = slow_stub.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=0))
        reader = stub.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=0))
        # Reading the first turn's events proves each watcher is subscribed before the long turn starts.
        await read_to(slow, first)
        await read_to(reader, first)
        fake_model.enqueue(text_deltas(DELTAS, DELTA))
        events = await stream_turn(stub, sid, "a long answer")
        assert kinds(events)[-1] == "run_finished"  # the run ended while the slow watcher read nothing
        last = events[-1].sequence

        read = await read_to(reader, last)
        reader.cancel()
        assert read == [e.sequence for e in events]  # the reading watcher got everything, in order

        delivered: list[int] = []

        async def drain() -> None:
            async for response in slow:
                delivered.append(response.event.sequence)

        error = await rpc_error(asyncio.wait_for(drain(), timeout=30))  # never cut off: a timeout, not a hang
        assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "SLOW_CONSUMER")
        assert delivered, "what was buffered before the overflow is delivered first"
        assert delivered == [e.sequence for e in events[: len(delivered)]]
        assert len(delivered) < len(events)
        resume_from = int(error.metadata["last_delivered_sequence"])
        assert resume_from == delivered[-1]
        # Reconnecting from the last sequence it was given replays the rest from the log.
        rest = await events_after(stub, sid, resume_from, last)
        assert [e.sequence for e in rest] == [e.sequence for e in events if e.sequence > resume_from]
