"""Where hook registrations apply and when the session and gateway hooks fire (docs/hooks.md): per-session
registrations from CreateSession (copied by ForkSession, dropped by DeleteSession), the SSRF guard on a tenant
caller's targets (the operator's may be on loopback), before_reset awaited by ResetSession,
gateway_start/gateway_stop and session_end at shutdown, and TLS targets whose client key is never listed."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import hook_pb2, hook_registration_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.domain.context import CallContext, CallerRole
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.session import SessionConfig, SessionIdentity
from general_agent_server.hooks.registrations import HookBindingSpec, HookRegistrationSpec
from tests.conftest import ServerFactory
from tests.support.hook_agent import Agent, as_dict, open_agent
from tests.support.hook_host import HookHost, ServicerContext, registration, returning
from tests.support.rpc import connect, create_session, stream_turn


@pytest.fixture
async def agent(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Agent]:
    async with open_agent(server_factory, tmp_path) as value:
        yield value


def session_ids(host: HookHost, hook: str) -> list[str]:
    return [c.request.context.session_id for c in host.of(hook)]


async def listed(agent: Agent, session_id: str = "") -> list[tuple[str, str]]:
    response = await agent.stub.ListHookRegistrations(
        hook_registration_pb2.ListHookRegistrationsRequest(session_id=session_id)
    )
    return [(r.plugin_id, r.session_id) for r in response.registrations]


async def test_session_registrations_reach_their_session_only_and_follow_fork_and_delete(
    agent: Agent, fake_model: FakeAnthropic
) -> None:
    host = await agent.host()
    per_session = registration("per-session", host.address, ("before_prompt_build", "session_start", "session_end"))
    mine = await create_session(agent.stub, hook_registrations=[per_session])
    other = await create_session(agent.stub)
    sid, other_id = mine.identity.session_id, other.identity.session_id
    # The session reports its own registrations (as stored, with its id).
    assert [(r.plugin_id, r.session_id) for r in mine.hook_registrations] == [("per-session", sid)]
    fetched = (await agent.stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
    assert [r.target.address for r in fetched.hook_registrations] == [host.address]
    # CreateSession answers with what it stored, without reading it back: the read gives the same.
    assert list(mine.hook_registrations) == list(fetched.hook_registrations)
    assert list(other.hook_registrations) == []
    fake_model.enqueue(TextReply("one"), TextReply("two"))
    await stream_turn(agent.stub, other_id, "hello")
    assert host.calls == []
    await stream_turn(agent.stub, sid, "hello")
    assert session_ids(host, "before_prompt_build") == [sid]
    assert await listed(agent, sid) == [("per-session", sid)]
    assert await listed(agent) == []  # not a tenant-wide registration

    fork = (await agent.stub.ForkSession(session_api.ForkSessionRequest(source_session_id=sid))).session
    fork_id = fork.identity.session_id
    assert await listed(agent, fork_id) == [("per-session", fork_id)]
    fake_model.enqueue(TextReply("three"))
    await stream_turn(agent.stub, fork_id, "hello again")
    assert session_ids(host, "before_prompt_build") == [sid, fork_id]

    await agent.stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))
    await host.wait_for("session_end")
    [ended] = host.of("session_end")
    # Transcript entries, not history messages: the system prompt, the user message and the reply (history has 2).
    assert (ended.request.event.session_id, ended.request.event.message_count) == (sid, 3)
    assert ended.request.context.dispatch_seq == 0  # outside a run
    starts = {c.request.context.session_id: c.request.event for c in host.of("session_start")}
    assert (starts[sid].session_id, starts[sid].resumed_from) == (sid, "")  # a fresh session
    assert starts[fork_id].resumed_from == sid  # a fork names its source
    assert await listed(agent, sid) == []
    # The fork's copy is its own: deleting the source leaves it in place.
    fake_model.enqueue(TextReply("four"))
    await stream_turn(agent.stub, fork_id, "still there?")
    assert session_ids(host, "before_prompt_build") == [sid, fork_id, fork_id]


async def test_the_operator_registers_loopback_hook_targets_without_the_allow_list(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    """Without authentication every caller is the operator, whose hook hosts may be on loopback (sidecars, the
    README's examples): RegisterHooks and CreateSession accept them with default settings, and they are called."""
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})
    host = HookHost()
    await host.start()
    try:
        async with connect(server.address) as stub:
            tenant_wide = registration("tenant-wide", host.address, ("before_prompt_build",))
            await stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=tenant_wide))
            per_session = registration("per-session", host.address, ("before_model_resolve",))
            session = await create_session(stub, hook_registrations=[per_session])
            fake_model.enqueue(TextReply("hi"))
            await stream_turn(stub, session.identity.session_id, "hello")

            assert host.names() == ["before_model_resolve", "before_prompt_build"]
            response = await stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
            assert [r.target.address for r in response.registrations] == [host.address]
    finally:
        await server.stop(grace=1.0)
        await host.stop()


TENANT = CallContext(role=CallerRole.TENANT)


def loopback_spec(target: str) -> HookRegistrationSpec:
    return HookRegistrationSpec(plugin_id="local", target=target, bindings=(HookBindingSpec(name="message_sending"),))


@pytest.mark.parametrize("target", ["127.0.0.1:50051", "10.0.0.7:50051", "[::1]:50051", "169.254.169.254:80"])
async def test_a_tenant_callers_loopback_and_private_hook_targets_are_refused(
    server_factory: ServerFactory, tmp_path: Path, target: str
) -> None:
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})

    with pytest.raises(ServiceError) as refused:
        await server.agent.register_hooks(TENANT, loopback_spec(target))
    assert (refused.value.code, refused.value.reason) == (ErrorCode.INVALID_ARGUMENT, "INVALID_HOOK")
    assert refused.value.field_violations[0].field == "registration.target.address"

    with pytest.raises(ServiceError) as refused:
        await server.agent.sessions.create_session(
            TENANT, identity=SessionIdentity(), config=SessionConfig(), hook_registrations=[loopback_spec(target)]
        )
    assert (refused.value.code, refused.value.reason) == (ErrorCode.INVALID_ARGUMENT, "INVALID_HOOK")
    assert refused.value.field_violations[0].field == "session.hook_registrations[0].target.address"
    assert await server.agent.hooks.registrations(TENANT.tenant, "") == []


async def test_a_tenant_caller_may_use_an_allow_listed_hook_target(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    server = await server_factory(
        {"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1", "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")}
    )

    stored = await server.agent.register_hooks(TENANT, loopback_spec("127.0.0.1:50051"))

    assert [r.plugin_id for r in await server.agent.hooks.registrations(TENANT.tenant, "")] == [stored.plugin_id]


async def test_reset_session_awaits_before_reset(agent: Agent, fake_model: FakeAnthropic) -> None:
    handled: list[Any] = []

    async def slow_observer(request: Any, context: ServicerContext) -> None:
        await asyncio.sleep(0.2)  # still running for a while after it was called: ResetSession must wait
        handled.append(request)

    host = await agent.host({"before_reset": slow_observer})
    await agent.register("observer", host.address, ("before_reset",))
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    fake_model.enqueue(TextReply("noted"))
    await stream_turn(agent.stub, sid, "remember this")
    reset = await agent.stub.ResetSession(session_api.ResetSessionRequest(session_id=sid, reason="clean slate"))
    assert len(handled) == 1
    event = handled[0].event
    assert event.reason == "clean slate"
    assert event.messages.message_count == 2
    assert event.session_file == reset.session.transcript_path
    assert handled[0].context.session_id == sid
    assert handled[0].context.dispatch_seq == 0  # outside a run


async def test_gateway_hooks_and_session_end_at_shutdown(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    state = tmp_path / "state"
    host = HookHost()
    await host.start()
    try:
        async with open_agent(server_factory, tmp_path, state_dir=state) as agent:
            await agent.register("lifecycle", host.address, ("gateway_start", "gateway_stop", "session_end"))
            active = await create_session(agent.stub)
            await create_session(agent.stub)  # never runs a turn: no session_start, so no session_end
            fake_model.enqueue(TextReply("hi"))
            await stream_turn(agent.stub, active.identity.session_id, "hello")
        # Leaving open_agent stopped the server; both hooks are awaited by the shutdown: no poll needed.
        assert [c.request.event.reason for c in host.of("gateway_stop")] == ["shutdown"]
        assert [c.request.event.session_id for c in host.of("session_end")] == [active.identity.session_id]
        assert host.of("session_end")[0].request.event.message_count == 3  # transcript entries
        assert host.of("gateway_start") == []  # the first server started before the registration

        async with open_agent(server_factory, tmp_path, state_dir=state) as restarted:
            port = int(restarted.server.address.rpartition(":")[2])
            await host.wait_for("gateway_start")  # not awaited by start-up
            assert [c.request.event.port for c in host.of("gateway_start")] == [port]
            # Deleting a session this process never loaded reports its stored transcript entries as well.
            await restarted.stub.DeleteSession(session_api.DeleteSessionRequest(session_id=active.identity.session_id))
            await host.wait_until(lambda: len(host.of("session_end")) == 2)
            deleted = host.of("session_end")[1].request.event
            assert (deleted.session_id, deleted.message_count) == (active.identity.session_id, 3)
    finally:
        await host.stop()


# ---------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class Certificate:
    name: str
    key_pem: bytes
    cert_pem: bytes


@pytest.fixture
def certificate(tmp_path: Path) -> Certificate:
    """A self-signed certificate for a made-up name (the `cryptography` package is not installed)."""
    name = "hooks.test"
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-nodes", "-days", "1"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-keyout", str(key), "-out", str(cert)),
            *("-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}"),
        ],
        check=True,
        capture_output=True,
    )
    return Certificate(name=name, key_pem=key.read_bytes(), cert_pem=cert.read_bytes())


async def test_tls_target_is_dialled_with_its_ca_and_the_client_key_is_never_listed(
    agent: Agent, certificate: Certificate
) -> None:
    host = HookHost({"message_sending": returning(hook_pb2.MessageSendingResult(content="over tls"))})
    await host.start(tls_key_and_cert=(certificate.key_pem, certificate.cert_pem))
    agent.hosts.append(host)
    tls = hook_registration_pb2.HookTls(
        ca_cert_pem=certificate.cert_pem.decode(),
        server_name_override=certificate.name,
        client_cert_pem=certificate.cert_pem.decode(),
        client_key_pem=certificate.key_pem.decode(),
    )
    request = hook_registration_pb2.RegisterHooksRequest(
        registration=registration("secure", host.address, ("message_sending",), tls=tls)
    )
    registered = (await agent.stub.RegisterHooks(request)).registration
    assert registered.target.tls.client_key_pem == ""
    # A session's own TLS registration: CreateSession answers from what it stored, which has no client key.
    per_session = registration("secure-session", host.address, ("message_sending",), tls=tls)
    created = await create_session(agent.stub, hook_registrations=[per_session])
    [created_tls] = [r.target.tls for r in created.hook_registrations]
    assert (created_tls.client_key_pem, created_tls.ca_cert_pem) == ("", tls.ca_cert_pem)

    emitted = await agent.stub.EmitHook(
        hook_registration_pb2.EmitHookRequest(hook_name="message_sending", event=_struct(content="hi"))
    )
    assert as_dict(emitted.result) == {"content": "over tls"}
    assert list(emitted.handler_errors) == []
    assert len(host.of("message_sending")) == 1

    response = await agent.stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
    [listed_tls] = [r.target.tls for r in response.registrations]
    assert listed_tls.client_key_pem == ""
    assert (listed_tls.ca_cert_pem, listed_tls.server_name_override) == (tls.ca_cert_pem, certificate.name)

    # The host speaks TLS only: the same target dialled in plaintext fails (and message_sending fails open).
    await agent.register("plain", host.address, ("message_sending",))
    emitted = await agent.stub.EmitHook(
        hook_registration_pb2.EmitHookRequest(hook_name="message_sending", event=_struct(content="hi"))
    )
    assert [e.plugin_id for e in emitted.handler_errors] == ["plain"]


def _struct(**fields: Any) -> struct_pb2.Struct:
    value = struct_pb2.Struct()
    value.update(fields)
    return value
