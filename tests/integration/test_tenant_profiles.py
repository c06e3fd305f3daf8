"""What a tenant may configure (docs/security.md): an auth profile limited to a tenant serves that tenant's
sessions (and only those), and a tenant's MCP URLs and stdio commands pass the SSRF guard and the stdio
allow-list, where the operator's (an admin's) may be loopback sidecars."""

from __future__ import annotations

from pathlib import Path

import grpc

from general_agent.testing import FakeAnthropic
from general_agent.v1 import event_pb2, mcp_pb2
from tests.conftest import ServerFactory
from tests.support.rpc import create_session, rpc_error, stream_turn, turn_call
from tests.support.tenants import ADMIN, ALICE, BOB, auth_env, stub_as

PROFILE = '\n[auth_profiles.alice-billing]\napi_key_env = "ALICE_ANTHROPIC_KEY"\nallowed_tenants = ["alice"]\n'
ALICE_KEY = "sk-ant-alice-profile-key-0000"


async def test_a_profile_limited_to_a_tenant_serves_that_tenant(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    profile = PROFILE + f'base_url = "{fake_model.base_url}"\n'
    server = await server_factory({**auth_env(tmp_path, profile), "ALICE_ANTHROPIC_KEY": ALICE_KEY})
    async with stub_as(server.address, ALICE) as alice:
        sid = (await create_session(alice, auth_profile_id="alice-billing")).identity.session_id
        events = await stream_turn(alice, sid, "hi")
        assert events[-1].run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert fake_model.requests[-1].api_key == ALICE_KEY
    async with stub_as(server.address, BOB) as bob:
        sid = (await create_session(bob, auth_profile_id="alice-billing")).identity.session_id
        error = await rpc_error(turn_call(bob, sid, "hi"))
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_API_KEY")
        assert error.message == "the session's auth profile 'alice-billing' is not available to tenant 'bob'"
    assert len(fake_model.requests) == 1


async def test_a_tenants_mcp_urls_and_commands_are_guarded(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = await server_factory(auth_env(tmp_path))
    loopback = {"side": mcp_pb2.McpServerConfig(http=mcp_pb2.McpHttpServer(url="http://127.0.0.1:9/mcp"))}
    metadata = {"meta": mcp_pb2.McpServerConfig(http=mcp_pb2.McpHttpServer(url="http://169.254.169.254/mcp"))}
    command = {"sh": mcp_pb2.McpServerConfig(stdio=mcp_pb2.McpStdioServer(command="/bin/sh"))}
    async with stub_as(server.address, ALICE) as alice:
        sid = (await create_session(alice)).identity.session_id
        for servers, field in (
            (loopback, "servers['side'].http.url"),
            (metadata, "servers['meta'].http.url"),
            (command, "servers['sh'].stdio.command"),
        ):
            error = await rpc_error(alice.SetMcpServers(mcp_pb2.SetMcpServersRequest(session_id=sid, servers=servers)))
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT, field
            assert [f for f, _ in error.field_violations] == [field]
        error = await rpc_error(create_session(alice, mcp_servers=loopback))
        assert [f for f, _ in error.field_violations] == ["session.mcp_servers['side'].http.url"]
    async with stub_as(server.address, ADMIN, tenant="alice") as operator:
        sid = (await create_session(operator, mcp_servers=loopback)).identity.session_id
        got = await operator.GetMcpServers(mcp_pb2.GetMcpServersRequest(session_id=sid))
        assert list(got.servers) == ["side"]
