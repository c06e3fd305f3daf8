"""Per-tenant rules over gRPC (docs/security.md): `exec` is offered to a tenant's sessions only where the
operator enabled it, and concurrent runs are bounded per tenant and per server — a turn past the bound is
refused RESOURCE_EXHAUSTED `RESOURCE_LIMIT` with RetryInfo, before anything is written, while other tenants'
turns go on."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from general_agent.testing import FakeAnthropic, HangReply
from general_agent.v1 import server_info_pb2, session_pb2
from tests.conftest import ServerFactory
from tests.support.rpc import create_session, read_until, rpc_error, stream_turn, turn_call
from tests.support.tenants import ADMIN, ALICE, BOB, auth_env, stub_as

CODING = session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING)


def offered_tools(fake: FakeAnthropic) -> set[str]:
    return {tool["name"] for tool in fake.requests[-1].body.get("tools", [])}


async def test_exec_is_offered_only_where_the_operator_enabled_it(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    server = await server_factory(auth_env(tmp_path, "\n[tenants.bob]\nexec = true\n"))
    offered = {}
    for name, token in (("alice", ALICE), ("bob", BOB), ("ops", ADMIN)):
        async with stub_as(server.address, token) as stub:
            session = await create_session(stub, identity=CODING)
            await stream_turn(stub, session.identity.session_id, "list the files")
            offered[name] = offered_tools(fake_model)
    assert "read" in offered["alice"]
    assert not {"exec", "process"} & offered["alice"]
    assert {"exec", "process"} <= offered["bob"]  # enabled for the tenant
    assert {"exec", "process"} <= offered["ops"]  # the operator's own tenant


async def test_runs_past_a_tenants_bound_are_refused_with_retry_info(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    server = await server_factory(auth_env(tmp_path, "\n[tenants.alice]\nmax_concurrent_runs = 1\n"))
    hang = HangReply(after_events=2)
    fake_model.enqueue(hang)
    async with stub_as(server.address, ALICE) as alice, stub_as(server.address, BOB) as bob:
        first = (await create_session(alice)).identity.session_id
        second = (await create_session(alice)).identity.session_id
        running = turn_call(alice, first, "a long one")
        await read_until(running, "run_started")
        error = await rpc_error(turn_call(alice, second, "one more"))
        assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_LIMIT")
        assert error.retry_delay is not None
        assert error.retry_delay > 0
        assert error.metadata["setting"] == "max_concurrent_runs_per_tenant"
        # Another tenant is not held up by alice's bound.
        other = (await create_session(bob)).identity.session_id
        assert (await stream_turn(bob, other, "hi"))[-1].WhichOneof("event") == "run_finished"
        hang.release()
        async for _ in running:
            pass
        # The refused turn never reached the model: alice's first turn and bob's are all it saw. (The count is
        # taken after both ended: run_started goes out while the first request may still be in flight.)
        assert len(fake_model.requests) == 2
        assert not any("one more" in json.dumps(request.body) for request in fake_model.requests)
        # The slot is free again once the run ended.
        assert (await stream_turn(alice, second, "now"))[-1].WhichOneof("event") == "run_finished"


async def test_the_server_wide_bound_applies_to_every_tenant(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    server = await server_factory(auth_env(tmp_path, max_concurrent_runs="1"))
    hang = HangReply(after_events=2)
    fake_model.enqueue(hang)
    async with stub_as(server.address, ALICE) as alice, stub_as(server.address, BOB) as bob:
        info = await alice.GetServerInfo(server_info_pb2.GetServerInfoRequest())
        assert info.limits.max_concurrent_runs == 1
        running = turn_call(alice, (await create_session(alice)).identity.session_id, "a long one")
        await read_until(running, "run_started")
        error = await rpc_error(turn_call(bob, (await create_session(bob)).identity.session_id, "hi"))
        assert (error.code, error.metadata["setting"]) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "max_concurrent_runs")
        hang.release()
        async for _ in running:
            pass


async def test_server_info_reports_the_calling_tenants_limits(server_factory: ServerFactory, tmp_path: Path) -> None:
    extra = "\n[tenants.alice]\nmax_concurrent_runs = 2\nmax_sessions = 4\n"
    server = await server_factory(
        auth_env(tmp_path, extra, max_concurrent_runs_per_tenant="6", max_sessions_per_tenant="9")
    )
    reported = {}
    for caller, token, tenant in (("alice", ALICE, ""), ("bob", BOB, ""), ("ops for alice", ADMIN, "alice")):
        async with stub_as(server.address, token, tenant) as stub:
            info = await stub.GetServerInfo(server_info_pb2.GetServerInfoRequest())
            reported[caller] = (info.tenant, info.limits.tenant_max_concurrent_runs, info.limits.tenant_max_sessions)
    assert reported == {
        "alice": ("alice", 2, 4),  # her [tenants.alice] table
        "bob": ("bob", 6, 9),  # the server's per-tenant settings
        "ops for alice": ("alice", 2, 4),  # an admin acting for alice sees hers
    }
