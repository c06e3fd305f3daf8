"""Size limits on what a request can make the server keep per session (settings max_*): over a limit the
request is INVALID_ARGUMENT naming the field and the limit, and nothing is stored; at the limit it passes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from general_agent import AgentError
from general_agent.v1 import (
    agent_service_pb2_grpc,
    hook_registration_pb2,
    hosted_tool_pb2,
    session_pb2,
)
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.rpc import Stub, create_session, rpc_error

LIMITS = {
    "max_system_prompt_bytes": 1000,
    "max_hosted_tools": 2,
    "max_hosted_tool_schema_bytes": 200,
    "max_hosted_tool_description_bytes": 100,
    "max_labels": 3,
    "max_label_key_chars": 10,
    "max_label_value_chars": 20,
    "max_allowed_tools": 2,
    "max_session_key_chars": 30,
    "max_hook_registrations": 2,
    "max_hook_tls_pem_bytes": 100,
}


@pytest.fixture
async def limited(server_factory: ServerFactory) -> AsyncIterator[tuple[RunningServer, Stub]]:
    env = {f"GENERAL_AGENT_{name.upper()}": str(value) for name, value in LIMITS.items()}
    env["GENERAL_AGENT_SSRF_ALLOW_HOSTS"] = "127.0.0.1"
    server = await server_factory(env)
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield server, agent_service_pb2_grpc.AgentServiceStub(channel)


def assert_over(error: AgentError, field: str, setting: str) -> None:
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"), error
    assert [f for f, _ in error.field_violations] == [field], error
    assert error.metadata == {"limit": setting, "value": str(LIMITS[setting])}
    assert f"over the limit of {LIMITS[setting]} ({setting})" in error.message


def tool(
    name: str = "t", description: str = "", schema: dict[str, Any] | None = None
) -> hosted_tool_pb2.HostedToolDefinition:
    return hosted_tool_pb2.HostedToolDefinition(
        name=name, description=description, input_schema_json=json.dumps(schema or {"type": "object"})
    )


def schema_of_size(size: int) -> dict[str, Any]:
    base = {"type": "object", "description": ""}
    padding = size - len(json.dumps(base, separators=(",", ":")))
    return {"type": "object", "description": "d" * padding}


SESSION_CASES: list[Any] = [
    ("system_prompt", {"system_prompt": "é" * 501}, {"system_prompt": "é" * 500}, "max_system_prompt_bytes"),
    (
        "hosted_tools",
        {"hosted_tools": [tool("a"), tool("b"), tool("c")]},
        {"hosted_tools": [tool("a"), tool("b")]},
        "max_hosted_tools",
    ),
    (
        "hosted_tools[0].input_schema",
        {"hosted_tools": [tool(schema=schema_of_size(201))]},
        {"hosted_tools": [tool(schema=schema_of_size(200))]},
        "max_hosted_tool_schema_bytes",
    ),
    (
        "hosted_tools[0].description",
        {"hosted_tools": [tool(description="d" * 101)]},
        {"hosted_tools": [tool(description="d" * 100)]},
        "max_hosted_tool_description_bytes",
    ),
    ("labels", {"labels": {"a": "", "b": "", "c": "", "d": ""}}, {"labels": {"a": "", "b": "", "c": ""}}, "max_labels"),
    ("labels", {"labels": {"k" * 11: ""}}, {"labels": {"k" * 10: ""}}, "max_label_key_chars"),
    ("labels[k]", {"labels": {"k": "v" * 21}}, {"labels": {"k": "v" * 20}}, "max_label_value_chars"),
    (
        "allowed_tools",
        {"allowed_tools": ["read", "glob", "grep"]},
        {"allowed_tools": ["read", "glob"]},
        "max_allowed_tools",
    ),
    (
        "identity.session_key",
        {"identity": session_pb2.SessionIdentity(session_key="k" * 31)},
        {"identity": session_pb2.SessionIdentity(session_key="k" * 30)},
        "max_session_key_chars",
    ),
]


@pytest.mark.parametrize(("field", "over", "at", "setting"), SESSION_CASES, ids=[c[3] for c in SESSION_CASES])
async def test_create_session_over_a_limit_is_refused_and_at_it_accepted(
    limited: tuple[RunningServer, Stub], field: str, over: dict[str, Any], at: dict[str, Any], setting: str
) -> None:
    _, stub = limited
    assert_over(await rpc_error(create_session(stub, **over)), f"session.{field}", setting)
    assert list((await stub.ListSessions(session_api.ListSessionsRequest())).sessions) == []
    session = await create_session(stub, **at)
    assert (await stub.ListSessions(session_api.ListSessionsRequest())).sessions == [session]


async def test_the_default_system_prompt_limit_is_256_kib(stub: Stub) -> None:
    error = await rpc_error(create_session(stub, system_prompt="x" * (256 * 1024 + 1)))
    assert error.field_violations[0][0] == "session.system_prompt"
    assert error.metadata == {"limit": "max_system_prompt_bytes", "value": str(256 * 1024)}
    assert len(error.message) < 200
    await create_session(stub, system_prompt="x" * 256 * 1024)


async def test_overrides_are_held_to_the_same_limits(limited: tuple[RunningServer, Stub]) -> None:
    _, stub = limited
    session_id = (await create_session(stub, system_prompt="short")).identity.session_id
    too_long = session_pb2.SessionOverrides(system_prompt="p" * 1001)
    for call in (
        stub.ResumeSession(session_api.ResumeSessionRequest(session_id=session_id, overrides=too_long)),
        stub.ForkSession(session_api.ForkSessionRequest(source_session_id=session_id, overrides=too_long)),
        stub.ContinueSession(
            session_api.ContinueSessionRequest(
                identity=session_pb2.SessionIdentity(session_id=session_id), overrides=too_long
            )
        ),
    ):
        assert_over(await rpc_error(call), "overrides.system_prompt", "max_system_prompt_bytes")
    fetched = await stub.GetSession(session_api.GetSessionRequest(session_id=session_id))
    assert fetched.session.system_prompt == "short"


def registration(plugin_id: str, session_id: str = "", **tls: str) -> hook_registration_pb2.HookRegistration:
    target = hook_registration_pb2.HookTarget(
        address="127.0.0.1:1", tls=hook_registration_pb2.HookTls(**tls) if tls else None
    )
    out = hook_registration_pb2.HookRegistration(plugin_id=plugin_id, target=target, session_id=session_id)
    out.hooks.add(name=hook_registration_pb2.HOOK_NAME_SESSION_START)
    return out


async def test_hook_registrations_per_scope_are_bounded(limited: tuple[RunningServer, Stub]) -> None:
    _, stub = limited
    for plugin in ("a", "b"):
        await stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=registration(plugin)))
    error = await rpc_error(
        stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=registration("c")))
    )
    assert_over(error, "registration", "max_hook_registrations")
    # Replacing a registration by its plugin_id does not count twice; another scope has its own bound.
    await stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=registration("b")))
    session_id = (await create_session(stub)).identity.session_id
    await stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=registration("c", session_id)))
    listed = await stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
    assert sorted(r.plugin_id for r in listed.registrations) == ["a", "b"]
    error = await rpc_error(create_session(stub, hook_registrations=[registration(p) for p in "xyz"]))
    assert_over(error, "session.hook_registrations", "max_hook_registrations")


async def test_hook_tls_pems_are_bounded(limited: tuple[RunningServer, Stub]) -> None:
    _, stub = limited
    big = registration("tls", ca_cert_pem="c" * 101)
    error = await rpc_error(stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=big)))
    assert error.reason == "INVALID_HOOK"
    assert error.field_violations[0][0] == "registration.target.tls.ca_cert_pem"
    assert error.metadata == {"limit": "max_hook_tls_pem_bytes", "value": "100"}
