"""The transport floor of `turn_fresh` (bench/transport_floor.py): a bare grpc.aio server in its own process that
answers every StreamTurn with the responses one service turn sent, byte for byte, and nothing else."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import grpc
import pytest

from bench.transport_floor import decode_responses, encode_responses, start_transport_floor
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, session_messages_pb2, turn_pb2


def _turn() -> list[bytes]:
    started = turn_pb2.StreamTurnResponse()
    started.event.sequence = 1
    started.event.run_started.SetInParent()
    delta = turn_pb2.StreamTurnResponse()
    delta.event.sequence = 2
    delta.event.assistant_delta.text = "hello"
    finished = turn_pb2.StreamTurnResponse()
    finished.event.sequence = 3
    finished.event.run_finished.outcome = event_pb2.RUN_OUTCOME_COMPLETED
    return [started.SerializeToString(), delta.SerializeToString(), finished.SerializeToString()]


def test_the_responses_file_round_trips() -> None:
    turn = _turn()
    assert [r.SerializeToString() for r in decode_responses(encode_responses(turn))] == turn


async def test_every_call_gets_the_turns_responses_and_nothing_else(tmp_path: Path) -> None:
    turn = _turn()
    async with contextlib.AsyncExitStack() as stack:
        floor, address = await start_transport_floor(stack, tmp_path, min(os.sched_getaffinity(0)), turn)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            for _ in range(2):
                got = [r.SerializeToString() async for r in stub.StreamTurn(turn_pb2.StreamTurnRequest(session_id="s"))]
                assert got == turn
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.GetSession(session_messages_pb2.GetSessionRequest(session_id="s"))
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        floor.check_alive()


async def test_a_floor_without_responses_is_refused(tmp_path: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        with pytest.raises(ValueError, match="responses"):
            await start_transport_floor(stack, tmp_path, 0, [])
