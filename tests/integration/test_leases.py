"""Session leases (docs/architecture.md, leases): two server replicas sharing one store never drive the same session at
once. The replica that loaded a session holds its lease; the other gets FAILED_PRECONDITION `SESSION_BUSY` with a retry
delay until the first releases it (at shutdown) or lets it expire."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import agent_service_pb2_grpc, event_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.rpc import create_session, rpc_error, stream_turn, text_input


async def test_a_second_replica_waits_for_the_lease(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    # asyncio debug mode, and the suite's check for exceptions nobody retrieved (tests/conftest.py), catch a
    # refused load whose failure was left in an unobserved future.
    asyncio.get_running_loop().set_debug(True)
    state = tmp_path / "shared-state"
    first = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-a"}, state_dir=state)
    second = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-b"}, state_dir=state)
    async with (
        grpc.aio.insecure_channel(first.address) as channel_a,
        grpc.aio.insecure_channel(second.address) as channel_b,
    ):
        a = agent_service_pb2_grpc.AgentServiceStub(channel_a)
        b = agent_service_pb2_grpc.AgentServiceStub(channel_b)
        sid = (await create_session(a)).identity.session_id
        fake_model.enqueue(TextReply("from a"))
        assert last_of(await stream_turn(a, sid, "hi"), "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED

        busy = await rpc_error(b.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("me too"))))
        assert (busy.code, busy.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
        assert busy.retry_delay is not None
        assert busy.retry_delay > 0

        # Reads that do not load the session still work on the other replica.
        listed = await b.ListSessions(session_api.ListSessionsRequest())
        assert [s.identity.session_id for s in listed.sessions] == [sid]

        await first.stop(grace=1.0)  # releases its leases
        fake_model.enqueue(TextReply("from b"))
        events = await stream_turn(b, sid, "still there?")
        assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        # B continued the conversation A stored.
        assert [m["role"] for m in fake_model.requests[-1].messages] == ["user", "assistant", "user"]
