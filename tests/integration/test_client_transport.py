"""The client's channel against a stand-in AgentService on port 0: the bearer token and request ids in the
metadata, gRPC's own retries (service config) for idempotent calls only, and the default deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from general_agent import AgentClient, AgentError
from general_agent.v1 import session_messages_pb2, session_pb2, turn_pb2


@dataclass
class StandIn:
    """Answers GetSession and CancelRun; the first `failures` calls of each fail UNAVAILABLE."""

    failures: int = 1
    calls: dict[str, int] = field(default_factory=dict)
    metadata: list[dict[str, str]] = field(default_factory=list)

    async def _count(self, name: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.metadata.append({key: str(value) for key, value in context.invocation_metadata() or ()})
        if self.calls[name] <= self.failures:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "try again")

    async def get_session(
        self, request: session_messages_pb2.GetSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> session_messages_pb2.GetSessionResponse:
        await self._count("GetSession", context)
        identity = session_pb2.SessionIdentity(session_id=request.session_id)
        return session_messages_pb2.GetSessionResponse(session=session_pb2.Session(identity=identity))

    async def cancel_run(
        self, request: turn_pb2.CancelRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> turn_pb2.CancelRunResponse:
        await self._count("CancelRun", context)
        return turn_pb2.CancelRunResponse(cancelled=True, run_id="r1")


@pytest.fixture
async def stand_in() -> AsyncIterator[tuple[StandIn, str]]:
    servicer = StandIn()
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "GetSession": grpc.unary_unary_rpc_method_handler(
            servicer.get_session,
            request_deserializer=session_messages_pb2.GetSessionRequest.FromString,
            response_serializer=session_messages_pb2.GetSessionResponse.SerializeToString,
        ),
        "CancelRun": grpc.unary_unary_rpc_method_handler(
            servicer.cancel_run,
            request_deserializer=turn_pb2.CancelRunRequest.FromString,
            response_serializer=turn_pb2.CancelRunResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("general_agent.v1.AgentService", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_idempotent_calls_are_retried_by_the_channel(stand_in: tuple[StandIn, str]) -> None:
    servicer, address = stand_in
    async with await AgentClient.connect(address) as client:
        session = await client.get_session("s1")

    assert session.identity.session_id == "s1"
    assert servicer.calls["GetSession"] == 2  # one UNAVAILABLE, one retry: the caller saw only the answer


async def test_calls_that_are_not_idempotent_are_not_retried(stand_in: tuple[StandIn, str]) -> None:
    servicer, address = stand_in
    async with await AgentClient.connect(address) as client:
        with pytest.raises(AgentError) as failed:
            await client.cancel_run("s1")

    assert failed.value.code == grpc.StatusCode.UNAVAILABLE
    assert servicer.calls["CancelRun"] == 1


async def test_retries_can_be_switched_off(stand_in: tuple[StandIn, str]) -> None:
    servicer, address = stand_in
    async with await AgentClient.connect(address, retries=False) as client:
        with pytest.raises(AgentError):
            await client.get_session("s1")

    assert servicer.calls["GetSession"] == 1


async def test_the_token_is_sent_as_a_bearer_authorization(stand_in: tuple[StandIn, str]) -> None:
    servicer, address = stand_in
    servicer.failures = 0
    async with await AgentClient.connect(address, token="tok-123", metadata={"X-Tenant-Hint": "a"}) as client:
        await client.get_session("s1")
        await client.get_session("s2")

    first, second = servicer.metadata
    assert first["authorization"] == "Bearer tok-123"
    assert first["x-tenant-hint"] == "a"
    assert first["x-request-id"] != second["x-request-id"]  # a fresh id per call, for the server log


async def test_tls_to_a_plaintext_server_fails_as_unavailable(stand_in: tuple[StandIn, str]) -> None:
    _, address = stand_in
    with pytest.raises(AgentError) as failed:
        await AgentClient.connect(address, tls=True, connect_timeout=1.0)

    assert failed.value.code == grpc.StatusCode.UNAVAILABLE
