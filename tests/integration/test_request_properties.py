"""Property: whatever a client sends to any AgentService RPC — unary, server-streaming, and the RunSession
stream's first and later messages — the server never answers INTERNAL or UNKNOWN, and every
INVALID_ARGUMENT (as a call status or a RunSession command_result) carries a BadRequest field violation
and no internals. Requests are generated from the descriptors (tests/support/proto_fuzz.py) against a
real server on port 0 with the fake model — without auth, and with bearer tokens as a `tenant`-role caller
and as an `admin` acting for a tenant through `x-tenant` (the SSRF guard, exec gating and tenant scoping are
then in the path); the profile is derandomized so every run tries the same
requests, and the nasty cases found by hand are explicit examples."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.rpc import status_pb2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from general_agent.v1 import content_pb2, hook_pb2, hook_registration_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from general_agent_server.hooks.registry import HOOK_NAMES
from tests.conftest import ServerFactory
from tests.support.proto_fuzz import NASTY_STRINGS, SERVICE, callable_for, messages
from tests.support.rpc import decode_error, decode_status
from tests.support.tenants import ADMIN, ALICE, auth_env, blocking_channel_as

SEED = "fuzz-seed"
PROFILE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)
INTERNALS = ("Traceback", "upb_", "DecodeError", "Exception", "RecursionError", '.py"', "internal error")
CALL_TIMEOUT = 30.0


def strings(field: Any) -> st.SearchStrategy[str] | None:
    """Strings that reach past the first check: the seeded session, real hook names, a hook target."""
    if field.name in ("session_id", "source_session_id"):
        return st.one_of(st.just(SEED), st.text(max_size=8), st.sampled_from(NASTY_STRINGS))
    if field.name == "hook_name":
        return st.one_of(st.sampled_from(sorted(HOOK_NAMES)), st.text(max_size=8))
    if field.name == "address":
        return st.sampled_from(["127.0.0.1:1", "localhost:0", "a:b", ""])
    return None


def requests_for(method: str) -> st.SearchStrategy[Any]:
    """A request; for a client stream, a list of them: any messages, or an attach first (the RunSession
    protocol) so that later messages reach the attached session."""
    descriptor = SERVICE.methods_by_name[method]
    requests = messages(descriptor.input_type, strings)
    if not descriptor.client_streaming:
        return requests
    attach = messages(run_session_api.RunSessionAttach.DESCRIPTOR, strings).map(_with_attach)
    later = st.lists(requests, max_size=3)
    return st.one_of(later, st.tuples(attach, later).map(lambda pair: [pair[0], *pair[1]]))


def _with_attach(attach: Any) -> run_session_api.RunSessionRequest:
    return run_session_api.RunSessionRequest(attach=attach)


def nan_struct() -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"a": [1, math.nan]})
    return out


DEEP = "[" * 50_000 + "]" * 50_000
INF = struct_pb2.Value(number_value=math.inf)
EXAMPLES: dict[str, list[Any]] = {
    "CreateSession": [
        session_api.CreateSessionRequest(session=session_pb2.Session(labels={"A" * 10_000: "v"})),
        session_api.CreateSessionRequest(
            session=session_pb2.Session(
                hosted_tools=[hosted_tool_pb2.HostedToolDefinition(name="t", input_schema_json=DEEP)]
            )
        ),
        session_api.CreateSessionRequest(
            session=session_pb2.Session(limits=session_pb2.SessionLimits(max_model_calls_per_run=-1))
        ),
        session_api.CreateSessionRequest(session=session_pb2.Session(state=99)),  # type: ignore[arg-type]
    ],
    "SubmitHostedToolResult": [
        turn_api.SubmitHostedToolResultRequest(session_id=SEED, call_id="c", output=INF),
        turn_api.SubmitHostedToolResultRequest(session_id=SEED, call_id="c", output_json=DEEP),
        turn_api.SubmitHostedToolResultRequest(session_id=SEED, call_id="c", output_json="1", on_disconnect=99),  # type: ignore[arg-type]
    ],
    "EmitHook": [
        hook_registration_pb2.EmitHookRequest(hook_name="session_start", event=nan_struct()),
        hook_registration_pb2.EmitHookRequest(
            hook_name="session_start", context=hook_pb2.HookContext(extra=nan_struct())
        ),
    ],
    "RegisterHooks": [
        hook_registration_pb2.RegisterHooksRequest(
            registration=hook_registration_pb2.HookRegistration(
                plugin_id="p",
                target=hook_registration_pb2.HookTarget(address="127.0.0.1:1"),
                hooks=[hook_registration_pb2.HookBinding(name=99)],  # type: ignore[arg-type]
            )
        ),
    ],
    "ForkSession": [session_api.ForkSessionRequest(source_session_id=SEED, at_sequence=-1)],
    "ListSessions": [session_api.ListSessionsRequest(page_token="zz"), session_api.ListSessionsRequest(page_size=-1)],
    "StreamTurn": [
        turn_api.StreamTurnRequest(
            session_id=SEED, input=[content_pb2.ContentPart(text=content_pb2.TextPart(text="hi"))]
        ),
    ],
    "RunSession": [
        [
            run_session_api.RunSessionRequest(attach=run_session_api.RunSessionAttach(session_id=SEED)),
            run_session_api.RunSessionRequest(
                hosted_result=run_session_api.RunSessionHostedResult(call_id="c", output_json=DEEP)
            ),
            run_session_api.RunSessionRequest(
                turn=run_session_api.RunSessionTurn(
                    input=[content_pb2.ContentPart(text=content_pb2.TextPart(text="hi"))]
                )
            ),
        ],
    ],
}


def check_status(code: int, message: str, fields: list[str], where: str) -> None:
    assert code not in (grpc.StatusCode.INTERNAL.value[0], grpc.StatusCode.UNKNOWN.value[0]), (where, code, message)
    if code == grpc.StatusCode.INVALID_ARGUMENT.value[0]:
        assert fields, (where, message)
    assert not any(marker in message for marker in INTERNALS), (where, message)


def status_fields(status: status_pb2.Status) -> list[str]:
    return [field for field, _ in decode_status(status).field_violations]


def exercise(channel: grpc.Channel, method: str, request: Any) -> None:
    """Sends one request (or one RunSession stream) and checks every status that comes back. A blocking
    channel: when the server ends a stream early, grpc.aio's client replaces the server's status with an
    INTERNAL of its own for the writes that then fail; the blocking client keeps the server's."""
    _seed(channel)
    descriptor = SERVICE.methods_by_name[method]
    multi = callable_for(channel, descriptor)
    # A watch follows the session live until the client leaves: its deadline cuts it short.
    timeout = 1.0 if method == "WatchSession" else CALL_TIMEOUT
    try:
        if descriptor.server_streaming:
            for response in multi(iter(request) if descriptor.client_streaming else request, timeout=timeout):
                if isinstance(response, run_session_api.RunSessionResponse) and response.HasField("command_result"):
                    status = response.command_result.status
                    check_status(status.code, status.message, status_fields(status), f"{method} command_result")
        else:
            multi(request, timeout=timeout)
    except grpc.RpcError as error:
        decoded = decode_error(error)
        if method == "WatchSession" and decoded.code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return
        check_status(decoded.code.value[0], decoded.message, [f for f, _ in decoded.field_violations], method)


def _seed(channel: grpc.Channel) -> None:
    """The session requests address (DeleteSession may have removed it)."""
    create = callable_for(channel, SERVICE.methods_by_name["CreateSession"])
    request = session_api.CreateSessionRequest(
        session=session_pb2.Session(identity=session_pb2.SessionIdentity(session_id=SEED))
    )
    try:
        create(request, timeout=CALL_TIMEOUT)
    except grpc.RpcError as error:
        if decode_error(error).code != grpc.StatusCode.ALREADY_EXISTS:
            raise


def property_test(method: str, run: Callable[[Any], None], profile: settings = PROFILE) -> Callable[[], None]:
    test = given(requests_for(method))(profile(run))
    for request in EXAMPLES.get(method, ()):
        test = example(request)(test)
    return test


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", [m.name for m in SERVICE.methods])
async def test_no_request_is_answered_internal_or_unknown(server: RunningServer, method: str) -> None:
    def run_all() -> None:
        # Hypothesis drives a synchronous function: it runs in a worker thread while the server serves on
        # this event loop.
        with grpc.insecure_channel(server.address) as channel:
            property_test(method, lambda request: exercise(channel, method, request))()

    await asyncio.to_thread(run_all)


AUTH_PROFILE = settings(PROFILE, max_examples=15)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("caller", ["tenant", "admin"])
@pytest.mark.parametrize("method", [m.name for m in SERVICE.methods])
async def test_no_request_is_answered_internal_or_unknown_with_auth(
    server_factory: ServerFactory, tmp_path: Path, method: str, caller: str
) -> None:
    server = await server_factory(auth_env(tmp_path))
    token, tenant = (ALICE, "") if caller == "tenant" else (ADMIN, "alice")

    def run_all() -> None:
        with blocking_channel_as(server.address, token, tenant) as channel:
            property_test(method, lambda request: exercise(channel, method, request), AUTH_PROFILE)()

    await asyncio.to_thread(run_all)
