"""Bearer tokens over gRPC (docs/security.md): with tokens configured every AgentService RPC needs one — a
missing, malformed or unknown token is UNAUTHENTICATED with one message for all — while health and reflection
stay open unless configured otherwise; an admin acts on another tenant through `x-tenant`, a tenant may not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from general_agent.v1 import server_info_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.conftest import ServerFactory
from tests.support.proto_fuzz import SERVICE, callable_for, message_class
from tests.support.rpc import create_session, get_session, rpc_error
from tests.support.tenants import ADMIN, ALICE, BOB, auth_env, channel_as, stub_as

BAD_CREDENTIALS = [
    pytest.param(None, id="none"),
    pytest.param("not-a-token-0123456789", id="unknown"),
    pytest.param(ALICE[:-1], id="truncated"),
    pytest.param("", id="empty"),
]


async def call_with(channel: grpc.aio.Channel, method: str) -> Any:
    descriptor = SERVICE.methods_by_name[method]
    multi = callable_for(channel, descriptor)
    if not descriptor.client_streaming:
        return await rpc_error(multi(message_class(descriptor.input_type)()))
    return await refused_before_any_write(multi)


async def refused_before_any_write(multi: Any) -> Any:
    """The error of a streaming-request call that writes nothing until it has its status. The server refuses
    the call before it reads; a grpcio aio client whose write lands after that status reports INTERNAL
    "Internal error from Core" in its place, which would make the code asserted here a race."""
    answered = asyncio.Event()

    async def no_requests_until_answered() -> AsyncIterator[Any]:
        await answered.wait()
        return
        yield

    try:
        return await rpc_error(multi(no_requests_until_answered()))
    finally:
        answered.set()


@pytest.mark.parametrize("token", BAD_CREDENTIALS)
async def test_every_rpc_without_a_valid_token_is_unauthenticated(
    server_factory: ServerFactory, tmp_path: Path, token: str | None
) -> None:
    server = await server_factory(auth_env(tmp_path))
    messages = set()
    async with channel_as(server.address, token) as channel:
        for method in SERVICE.methods:
            error = await call_with(channel, method.name)
            assert (error.code, error.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"), method.name
            messages.add(error.message)
    assert len(messages) == 1  # no hint whether a token exists
    assert ALICE not in messages.pop()


async def test_a_basic_scheme_or_two_tokens_are_refused(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    async with grpc.aio.insecure_channel(server.address) as channel:
        info = callable_for(channel, SERVICE.methods_by_name["GetServerInfo"])
        for metadata in (
            [("authorization", f"Basic {ALICE}")],
            [("authorization", f"Bearer {ALICE}"), ("authorization", f"Bearer {BOB}")],
            [("authorization", f"Bearer {ALICE} extra")],
        ):
            error = await rpc_error(info(server_info_pb2.GetServerInfoRequest(), metadata=metadata))
            assert error.code == grpc.StatusCode.UNAUTHENTICATED, metadata


async def test_each_token_source_authenticates(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    for token in (ALICE, BOB, ADMIN):  # environment, sha256 and file
        async with stub_as(server.address, token) as stub:
            info = await stub.GetServerInfo(server_info_pb2.GetServerInfoRequest())
            assert info.api_version


async def test_health_and_reflection_stay_open(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    async with grpc.aio.insecure_channel(server.address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = [
            a
            async for a in reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
        ]
        assert any(s.name == SERVICE.full_name for s in answers[0].list_services_response.service)


async def test_health_can_require_a_token(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path, auth_open_health="false", auth_open_reflection="false"))
    async with grpc.aio.insecure_channel(server.address) as channel:
        error = await rpc_error(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest()))
        assert error.code == grpc.StatusCode.UNAUTHENTICATED
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        assert (await refused_before_any_write(reflection.ServerReflectionInfo)).code == grpc.StatusCode.UNAUTHENTICATED
    async with channel_as(server.address, ALICE) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING


async def test_the_tenant_of_a_token_owns_its_sessions(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    async with stub_as(server.address, ALICE) as alice:
        session = await create_session(alice)
        assert session.tenant == "alice"


async def test_an_admin_acts_on_another_tenant_through_x_tenant(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    async with stub_as(server.address, ALICE) as alice:
        session = await create_session(alice)
    async with stub_as(server.address, ADMIN) as admin:
        error = await rpc_error(admin.GetSession(session_api.GetSessionRequest(session_id=session.identity.session_id)))
        assert error.code == grpc.StatusCode.NOT_FOUND  # its own tenant, ops, has no such session
    async with stub_as(server.address, ADMIN, tenant="alice") as admin_as_alice:
        got = await get_session(admin_as_alice, session.identity.session_id)
        assert (got.identity.session_id, got.tenant) == (session.identity.session_id, "alice")
        made = await create_session(admin_as_alice)
        assert made.tenant == "alice"


async def test_a_tenant_may_not_name_another_tenant(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    async with stub_as(server.address, BOB, tenant="alice") as bob_as_alice:
        error = await rpc_error(bob_as_alice.ListSessions(session_api.ListSessionsRequest()))
        assert (error.code, error.reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    async with stub_as(server.address, BOB, tenant="bob") as bob:
        assert (await bob.ListSessions(session_api.ListSessionsRequest())).sessions == []
    async with stub_as(server.address, ADMIN, tenant="../etc") as admin:
        error = await rpc_error(admin.ListSessions(session_api.ListSessionsRequest()))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [f for f, _ in error.field_violations] == ["x-tenant"]


async def test_no_tokens_means_the_operator_and_x_tenant_is_ignored(server_factory: ServerFactory) -> None:
    server = await server_factory()
    async with stub_as(server.address, None, tenant="alice") as stub:
        assert (await create_session(stub)).tenant == "default"
