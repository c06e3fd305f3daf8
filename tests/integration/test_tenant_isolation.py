"""Tenant isolation over gRPC (docs/security.md, "Tenants"): every AgentService RPC, generated from the service
descriptor, is tried by tenant `bob` against tenant `alice`'s session. A foreign id is answered exactly as an
unknown id (code, reason, message, metadata: no existence oracle), nothing of alice's reaches bob, alice's
session is unchanged afterwards, and session ids are scoped by tenant (both may have `chat-42`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from general_agent.errors import AgentError
from general_agent.v1 import approval_pb2, content_pb2, hook_registration_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.proto_fuzz import SERVICE, callable_for, message_class
from tests.support.rpc import create_session, decode_error, get_session, rpc_error, stream_turn
from tests.support.tenants import ADMIN, ALICE, BOB, auth_env, channel_as, stub_as

SHARED_ID = "chat-42"
UNKNOWN_ID = "chat-99"  # the same length: messages compare after the id is replaced
MARKER = "alice-private-marker-7731"
ID_FIELDS = ("session_id", "source_session_id")
CALL_TIMEOUT = 3.0
TEXT = [content_pb2.ContentPart(text=content_pb2.TextPart(text="hello from bob"))]
# Fields besides the session id that get a request past its own validation to the session lookup.
PLAUSIBLE: dict[str, dict[str, Any]] = {
    "StreamTurn": {"input": TEXT},
    "InjectMessage": {"input": TEXT},
    "SubmitHostedToolResult": {"call_id": "call-1", "output_json": "1"},
    "ResolveApproval": {"call_id": "call-1", "decision": approval_pb2.APPROVAL_DECISION_APPROVE},
    "RestoreCheckpoint": {"checkpoint_id": "cp-1"},
    "ToggleMcpServer": {"server_name": "docs", "enabled": True},
    "MaybeCompactByTokens": {"threshold_pct": 50},
    "EmitHook": {"hook_name": "session_start"},
    "UnregisterHooks": {"plugin_id": "plugin-1"},
    "ResetSession": {"reason": "bob"},
    "ForkSession": {"identity": session_pb2.SessionIdentity(session_id="bob-fork")},
}
# RPCs whose id travels inside a nested message.
NESTED: dict[str, Callable[[str], Message | list[Message]]] = {
    "CreateSession": lambda sid: session_api.CreateSessionRequest(
        session=session_pb2.Session(identity=session_pb2.SessionIdentity(session_id=sid))
    ),
    "ContinueSession": lambda sid: session_api.ContinueSessionRequest(
        identity=session_pb2.SessionIdentity(session_id=sid)
    ),
    "RunSession": lambda sid: [
        run_session_api.RunSessionRequest(attach=run_session_api.RunSessionAttach(session_id=sid))
    ],
    "RegisterHooks": lambda sid: registration("plugin-1", sid),
}
# RPCs that address no session: checked on their own below.
UNADDRESSED = {"ListSessions", "GetServerInfo"}
# RPCs that make a session of the caller's own under the id: they must succeed for bob, in bob's tenant.
CREATING = {"CreateSession", "ContinueSession"}


def request_for(method: str, session_id: str) -> Message | list[Message]:
    if method in NESTED:
        return NESTED[method](session_id)
    descriptor = SERVICE.methods_by_name[method]
    names = {f.name for f in descriptor.input_type.fields}
    ids = {name: session_id for name in ID_FIELDS if name in names}
    assert ids, f"{method}: no session id field; add it to NESTED or UNADDRESSED"
    return message_class(descriptor.input_type)(**ids, **PLAUSIBLE.get(method, {}))


def normalised(text: str, session_id: str) -> str:
    return text.replace(session_id, "<id>")


async def outcome(channel: grpc.aio.Channel, method: str, request: Any, session_id: str) -> tuple[Any, list[bytes]]:
    """What the call answered (OK, or code, reason, message and metadata with the id replaced) and the bytes of
    every response message it got."""
    descriptor = SERVICE.methods_by_name[method]
    multi = callable_for(channel, descriptor)
    seen: list[bytes] = []
    try:
        if descriptor.server_streaming:
            call = multi(iter(request) if descriptor.client_streaming else request, timeout=CALL_TIMEOUT)
            async for response in call:
                seen.append(response.SerializeToString())
        else:
            seen.append((await multi(request, timeout=CALL_TIMEOUT)).SerializeToString())
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "DEADLINE_EXCEEDED", seen  # a stream that follows a session until the client leaves
        decoded: AgentError = decode_error(error)
        metadata = tuple(sorted((k, normalised(v, session_id)) for k, v in decoded.metadata.items()))
        return (decoded.code.name, decoded.reason, normalised(decoded.message, session_id), metadata), seen
    return "OK", seen


async def alice_state(server: RunningServer) -> Any:
    async with stub_as(server.address, ALICE) as alice:
        session = await get_session(alice, SHARED_ID)
        history = await alice.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=SHARED_ID))
        hooks = await alice.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
    session.ClearField("update_time")
    return session.SerializeToString(deterministic=True), history.SerializeToString(), hooks.SerializeToString()


@pytest.fixture
async def two_tenants(server_factory: ServerFactory, tmp_path: Path) -> RunningServer:
    """A server with tenants alice and bob; alice has session chat-42 with a turn that mentions MARKER and a
    label holding it."""
    server = await server_factory(auth_env(tmp_path))
    async with stub_as(server.address, ALICE) as alice:
        await create_session(
            alice, identity=session_pb2.SessionIdentity(session_id=SHARED_ID, session_key=MARKER), labels={"m": MARKER}
        )
        events = await stream_turn(alice, SHARED_ID, f"remember {MARKER}")
        assert events[-1].WhichOneof("event") == "run_finished"
    # A server-wide registration of alice's (by the operator: a tenant's may not target loopback).
    async with stub_as(server.address, ADMIN, tenant="alice") as operator:
        await operator.RegisterHooks(registration(MARKER, ""))
    return server


def registration(plugin_id: str, session_id: str) -> hook_registration_pb2.RegisterHooksRequest:
    return hook_registration_pb2.RegisterHooksRequest(
        registration=hook_registration_pb2.HookRegistration(
            plugin_id=plugin_id,
            session_id=session_id,
            target=hook_registration_pb2.HookTarget(address="127.0.0.1:1"),
            hooks=[hook_registration_pb2.HookBinding(name=hook_registration_pb2.HOOK_NAME_SESSION_START)],
        )
    )


@pytest.mark.timeout(120)
async def test_no_rpc_of_another_tenant_reaches_a_session(two_tenants: RunningServer) -> None:
    server = two_tenants
    before = await alice_state(server)
    methods = [m.name for m in SERVICE.methods if m.name not in UNADDRESSED]
    # Those that create a session under the id go last: until then bob has no chat-42 of its own.
    methods.sort(key=lambda name: name in CREATING)
    leaks: list[str] = []
    refused = 0
    async with channel_as(server.address, BOB) as bob:
        for method in methods:
            foreign, seen = await outcome(bob, method, request_for(method, SHARED_ID), SHARED_ID)
            unknown, _ = await outcome(bob, method, request_for(method, UNKNOWN_ID), UNKNOWN_ID)
            assert foreign == unknown, (method, foreign, unknown)
            leaks += [method for body in seen if MARKER.encode() in body or b"alice" in body]
            if method in CREATING:
                assert foreign == "OK", (method, foreign)
            elif foreign != "OK":
                refused += 1
    assert leaks == []
    # Nearly every RPC is refused as NOT_FOUND; the rest answer an unknown session alike (e.g. EmitHook's
    # handler count), which the comparison above covers.
    assert refused >= len(methods) - 5, refused
    assert await alice_state(server) == before
    async with stub_as(server.address, BOB) as bob_stub:
        mine = await get_session(bob_stub, SHARED_ID)
        assert mine.tenant == "bob"
        assert MARKER not in mine.SerializeToString().decode(errors="replace")


async def test_listing_shows_only_the_callers_sessions(two_tenants: RunningServer) -> None:
    async with stub_as(two_tenants.address, BOB) as bob:
        await create_session(bob, identity=session_pb2.SessionIdentity(session_id="bob-1"))
        listed = await bob.ListSessions(session_api.ListSessionsRequest())
        assert [s.identity.session_id for s in listed.sessions] == ["bob-1"]
        for query in (
            session_api.ListSessionsRequest(session_key_prefix=MARKER[:5]),
            session_api.ListSessionsRequest(labels={"m": MARKER}),
        ):
            assert list((await bob.ListSessions(query)).sessions) == []
    async with stub_as(two_tenants.address, ALICE) as alice:
        listed = await alice.ListSessions(session_api.ListSessionsRequest())
        assert [s.identity.session_id for s in listed.sessions] == [SHARED_ID]


async def test_two_tenants_may_each_have_a_session_of_one_id(two_tenants: RunningServer) -> None:
    async with stub_as(two_tenants.address, BOB) as bob:
        await create_session(bob, identity=session_pb2.SessionIdentity(session_id=SHARED_ID))
        events = await stream_turn(bob, SHARED_ID, "bob's own turn")
        assert events[-1].WhichOneof("event") == "run_finished"
        history = await bob.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=SHARED_ID))
        assert MARKER.encode() not in history.SerializeToString()
    async with stub_as(two_tenants.address, ALICE) as alice:
        history = await alice.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=SHARED_ID))
        assert b"bob's own turn" not in history.SerializeToString()
        assert MARKER.encode() in history.SerializeToString()


async def test_a_watch_of_another_tenants_session_is_not_found(two_tenants: RunningServer) -> None:
    async with stub_as(two_tenants.address, BOB) as bob:
        call = bob.WatchSession(turn_api.WatchSessionRequest(session_id=SHARED_ID, after_sequence=0))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await asyncio.wait_for(anext(aiter(call)), CALL_TIMEOUT)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_hook_registrations_are_the_tenants_own(two_tenants: RunningServer) -> None:
    async with stub_as(two_tenants.address, BOB) as bob:
        listed = await bob.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
        assert list(listed.registrations) == []
        removed = await bob.UnregisterHooks(hook_registration_pb2.UnregisterHooksRequest(plugin_id=MARKER))
        assert not removed.removed
    async with stub_as(two_tenants.address, ALICE) as alice:
        listed = await alice.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
        assert [r.plugin_id for r in listed.registrations] == [MARKER]


async def test_a_tenants_hook_target_passes_the_ssrf_guard(two_tenants: RunningServer) -> None:
    async with stub_as(two_tenants.address, ALICE) as alice:
        error = await rpc_error(alice.RegisterHooks(registration("loopback", "")))
        assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_HOOK")
        assert [f for f, _ in error.field_violations] == ["registration.target.address"]
