"""A benchmark turn against a server that never answers fails with the session named, instead of hanging the run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from bench.harness import ServiceClient
from bench.processes import BenchError
from bench.transport_floor import SERVICE
from general_agent.v1 import turn_pb2


def _hanging_handler(started: asyncio.Event) -> grpc.GenericRpcHandler:
    async def stream_turn(request: turn_pb2.StreamTurnRequest, context: Any) -> AsyncIterator[Any]:
        started.set()
        await asyncio.Event().wait()  # a server whose turn never finishes
        yield turn_pb2.StreamTurnResponse()

    method = grpc.unary_stream_rpc_method_handler(
        stream_turn,
        request_deserializer=turn_pb2.StreamTurnRequest.FromString,
        response_serializer=turn_pb2.StreamTurnResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE, {"StreamTurn": method})


@pytest.mark.parametrize("call", ["turn", "responses"])
async def test_a_turn_with_no_end_fails_at_the_deadline(call: str) -> None:
    started = asyncio.Event()
    server = grpc.aio.server(handlers=[_hanging_handler(started)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = ServiceClient(f"127.0.0.1:{port}", turn_deadline_s=0.3)
    try:
        with pytest.raises(BenchError, match=r"service turn on sess-1 got no run_finished within 0\.3 s"):
            await getattr(client, call)("sess-1")
        assert started.is_set()  # the call reached the server: the deadline, not a refused connection, ended it
    finally:
        await client.close()
        await server.stop(None)
