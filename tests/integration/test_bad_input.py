"""Bad input against a real server: every enum field of every request with an undeclared value, corrupt
wire bytes through a generic channel call, and the cases a fuzzing session found answered INTERNAL or
UNKNOWN (or accepted and stored) — each must be INVALID_ARGUMENT with the field named and no internals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2
from google.protobuf.message import Message
from google.rpc import status_pb2

from general_agent import AgentError
from general_agent.v1 import (
    checkpoint_pb2,
    content_pb2,
    hook_pb2,
    hook_registration_pb2,
    hosted_tool_pb2,
    session_pb2,
)
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.support.proto_fuzz import SERVICE, EnumSite, callable_for, enum_sites, message_class, out_of_range, with_enum
from tests.support.rpc import Stub, create_session, decode_status, rpc_error

ENUM_SITES = [(method.name, site) for method in SERVICE.methods for site in enum_sites(method.input_type)]
ENUM_CASES = [
    pytest.param(method, site, number, id=f"{method}:{site.path}={number}")
    for method, site in ENUM_SITES
    for number in out_of_range(site.enum_values)
]
INTERNALS = ("Traceback", "upb", "DecodeError", "Exception", "Error parsing", "RecursionError", ".py")


@pytest.fixture
async def channel(server: RunningServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield channel


async def call(channel: grpc.aio.Channel, method: str, request: Message | bytes) -> AgentError:
    """Sends one request (a unary or server-streaming call, or the first message of a stream) that must
    fail, and decodes the status."""
    descriptor = SERVICE.methods_by_name[method]
    multi = callable_for(channel, descriptor, raw=isinstance(request, bytes))
    target: Any = multi(iter([request])) if descriptor.client_streaming else multi(request)
    return await rpc_error(target)


def command_statuses(responses: list[run_session_api.RunSessionResponse]) -> list[status_pb2.Status]:
    return [r.command_result.status for r in responses if r.WhichOneof("response") == "command_result"]


async def run_session(channel: grpc.aio.Channel, session_id: str, later: Message | bytes) -> list[Any]:
    """Attaches, sends `later` (raw bytes or a message) and half-closes; returns what the server sent."""
    descriptor = SERVICE.methods_by_name["RunSession"]
    attach = run_session_api.RunSessionRequest(attach=run_session_api.RunSessionAttach(session_id=session_id))
    raw = isinstance(later, bytes)
    first: Message | bytes = attach.SerializeToString() if raw else attach
    stream = callable_for(channel, descriptor, raw=raw)(iter([first, later]))
    return [response async for response in stream]


def violations(status: status_pb2.Status) -> list[str]:
    return [field for field, _ in decode_status(status).field_violations]


def assert_named(error: AgentError, field: str, reason: str = "INVALID_ARGUMENT") -> None:
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason), error
    assert [f for f, _ in error.field_violations] == [field], error
    assert not any(marker in error.message for marker in INTERNALS), error.message


@pytest.mark.parametrize(("method", "site", "number"), ENUM_CASES)
async def test_every_undeclared_enum_value_is_invalid_argument_naming_the_field(
    channel: grpc.aio.Channel, stub: Stub, method: str, site: EnumSite, number: int
) -> None:
    request = with_enum(message_class(SERVICE.methods_by_name[method].input_type)(), site, number)
    reason = "INVALID_HOOK" if site.hook else "INVALID_ARGUMENT"
    assert_named(await call(channel, method, request), site.path, reason)
    if method == "RunSession" and not site.path.startswith("attach."):
        # A later message of an attached stream is answered with a command_result, not the end of the stream.
        session = await create_session(stub)
        statuses = command_statuses(await run_session(channel, session.identity.session_id, request))
        assert [(s.code, violations(s)) for s in statuses] == [(grpc.StatusCode.INVALID_ARGUMENT.value[0], [site.path])]


def test_the_enum_cases_cover_the_known_gaps() -> None:
    paths = {(method, site.path) for method, site in ENUM_SITES}
    assert ("RegisterHooks", "registration.hooks[0].name") in paths
    assert ("CreateSession", "session.hook_registrations[0].hooks[0].failure_policy") in paths
    assert ("SubmitHostedToolResult", "on_disconnect") in paths
    assert ("EmitHook", "context.extra") in paths  # a NullValue inside a Struct


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def bad_utf8(descriptor: Any) -> bytes:
    """The request with its first string field (searched depth first) holding bytes that are not UTF-8."""
    for field in descriptor.fields:
        if field.type == field.TYPE_STRING:
            return _field(field.number, b"\xc3\x28")
    for field in descriptor.fields:
        if field.type == field.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            return _field(field.number, bad_utf8(field.message_type))
    raise AssertionError(f"{descriptor.name} has no string field")


def deep_value(depth: int) -> bytes:
    """A google.protobuf.Value holding a list holding a list ... `depth` times."""
    value = b""
    for _ in range(depth):
        value = _field(6, _field(1, value))  # Value.list_value → ListValue.values
    return value


CORRUPT: dict[str, Any] = {
    "wire format": lambda descriptor: b"\x0a\xff\xff\xff\xff",
    "invalid UTF-8": bad_utf8,
}
DECODE_FAILURES = {
    "wire format": "the bytes are not a valid protobuf encoding",
    "invalid UTF-8": "a string field is not valid UTF-8",
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
@pytest.mark.parametrize(
    "method", ["GetSession", "CreateSession", "StreamTurn", "SubmitHostedToolResult", "RunSession"]
)
async def test_corrupt_wire_bytes_are_invalid_argument_with_error_info(
    channel: grpc.aio.Channel, method: str, kind: str
) -> None:
    descriptor = SERVICE.methods_by_name[method].input_type
    error = await call(channel, method, CORRUPT[kind](descriptor))
    assert_named(error, descriptor.name)
    assert error.message == f"{descriptor.name}: could not be decoded: {DECODE_FAILURES[kind]}"


async def test_messages_nested_past_the_decoder_limit_are_invalid_argument(channel: grpc.aio.Channel) -> None:
    request = _field(1, b"s") + _field(2, b"c") + _field(3, deep_value(120))  # output: a Value 240 levels deep
    error = await call(channel, "SubmitHostedToolResult", request)
    assert_named(error, "SubmitHostedToolResultRequest")
    assert error.message.endswith("messages are nested more than 100 levels deep")


async def test_a_corrupt_later_run_session_message_is_a_rejected_command(channel: grpc.aio.Channel, stub: Stub) -> None:
    session = await create_session(stub)
    later = bad_utf8(run_session_api.RunSessionRequest.DESCRIPTOR)
    statuses = command_statuses(await run_session(channel, session.identity.session_id, later))
    assert [(s.code, violations(s)) for s in statuses] == [
        (grpc.StatusCode.INVALID_ARGUMENT.value[0], ["RunSessionRequest"])
    ]


async def test_a_refused_later_command_keeps_its_command_id(channel: grpc.aio.Channel, stub: Stub) -> None:
    session = await create_session(stub)
    later = run_session_api.RunSessionRequest(
        turn=run_session_api.RunSessionTurn(
            command_id="c-1",
            options=turn_api.TurnOptions(busy_policy=77),  # type: ignore[arg-type]
        )
    )
    responses = await run_session(channel, session.identity.session_id, later)
    results = [r.command_result for r in responses if r.WhichOneof("response") == "command_result"]
    assert [(r.command_id, r.status.code, violations(r.status)) for r in results] == [
        ("c-1", grpc.StatusCode.INVALID_ARGUMENT.value[0], ["turn.options.busy_policy"])
    ]


def nan_struct() -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"a": {"b": [1, float("nan")]}})
    return out


def registration(**binding: Any) -> hook_registration_pb2.HookRegistration:
    out = hook_registration_pb2.HookRegistration(
        plugin_id="p", target=hook_registration_pb2.HookTarget(address="127.0.0.1:1")
    )
    out.hooks.add(name=hook_registration_pb2.HOOK_NAME_SESSION_START, **binding)
    return out


DEEP_JSON = "[" * 50_000 + "]" * 50_000
INF = struct_pb2.Value(number_value=float("inf"))
NASTY: list[Any] = [
    (
        "EmitHook",
        hook_registration_pb2.EmitHookRequest(hook_name="session_start", event=nan_struct()),
        "event",
        "INVALID_ARGUMENT",
    ),
    (
        "EmitHook",
        hook_registration_pb2.EmitHookRequest(
            hook_name="session_start", context=hook_pb2.HookContext(extra=nan_struct())
        ),
        "context.extra",
        "INVALID_ARGUMENT",
    ),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c", output=INF),
        "output",
        "",
    ),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c", output_json="1", details=INF),
        "details",
        "",
    ),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c", output_json=DEEP_JSON),
        "output_json",
        "",
    ),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c", output_json="[1, NaN]"),
        "output_json",
        "",
    ),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c", output_json="1e999"),
        "output_json",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(
            session=session_pb2.Session(
                hosted_tools=[hosted_tool_pb2.HostedToolDefinition(name="t", input_schema_json=DEEP_JSON)]
            )
        ),
        "session.hosted_tools[0].input_schema_json",
        "",
    ),
    (
        "StreamTurn",
        turn_api.StreamTurnRequest(
            session_id="s",
            input=[content_pb2.ContentPart(tool_result=content_pb2.ToolResultPart(call_id="c", output=INF))],
        ),
        "input[0].tool_result.output",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(
            session=session_pb2.Session(limits=session_pb2.SessionLimits(max_model_calls_per_run=-1))
        ),
        "session.limits.max_model_calls_per_run",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(
            session=session_pb2.Session(limits=session_pb2.SessionLimits(max_tool_calls_per_run=-3))
        ),
        "session.limits.max_tool_calls_per_run",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(
            session=session_pb2.Session(
                limits=session_pb2.SessionLimits(run_deadline=duration_pb2.Duration(seconds=-5))
            )
        ),
        "session.limits.run_deadline",
        "",
    ),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c", output_json="1", on_disconnect=99),  # type: ignore[arg-type]
        "on_disconnect",
        "",
    ),
    (
        "RegisterHooks",
        hook_registration_pb2.RegisterHooksRequest(registration=registration(failure_policy=99)),
        "registration.hooks[0].failure_policy",
        "INVALID_HOOK",
    ),
    (
        "RegisterHooks",
        hook_registration_pb2.RegisterHooksRequest(registration=registration(include_messages=99)),
        "registration.hooks[0].include_messages",
        "INVALID_HOOK",
    ),
    ("ForkSession", session_api.ForkSessionRequest(source_session_id="s", at_sequence=-1), "at_sequence", ""),
    ("WatchSession", turn_api.WatchSessionRequest(session_id="s", after_sequence=-2), "after_sequence", ""),
    (
        "CreateSession",
        session_api.CreateSessionRequest(session=session_pb2.Session(labels={"A" * 10_000: "v"})),
        "session.labels",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(session=session_pb2.Session(), request_id="r" * 10_000),
        "request_id",
        "",
    ),
    ("ListSessions", session_api.ListSessionsRequest(page_token="zz"), "page_token", "INVALID_PAGE_TOKEN"),
    ("ListSessions", session_api.ListSessionsRequest(page_size=-1), "page_size", ""),
    ("SubmitHostedToolResult", turn_api.SubmitHostedToolResultRequest(session_id="s", output_json="1"), "call_id", ""),
    (
        "SubmitHostedToolResult",
        turn_api.SubmitHostedToolResultRequest(session_id="s", call_id="c" * 10_000, output_json="1"),
        "call_id",
        "",
    ),
    (
        "RestoreCheckpoint",
        checkpoint_pb2.RestoreCheckpointRequest(session_id="s", checkpoint_id="c" * 10_000),
        "checkpoint_id",
        "",
    ),
    ("EmitHook", hook_registration_pb2.EmitHookRequest(hook_name="h" * 10_000), "hook_name", "INVALID_HOOK"),
    (
        "CreateSession",
        session_api.CreateSessionRequest(session=session_pb2.Session(), api_key="k" * 10_000),
        "api_key",
        "",
    ),
    (
        "ResumeSession",
        session_api.ResumeSessionRequest(session_id="s", overrides=session_pb2.SessionOverrides(api_key="k" * 10_000)),
        "overrides.api_key",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(
            session=session_pb2.Session(disabled_mcp_servers=[f"m{i}" for i in range(65)])
        ),
        "session.disabled_mcp_servers",
        "",
    ),
    (
        "CreateSession",
        session_api.CreateSessionRequest(session=session_pb2.Session(allowed_tools=["read", "t" * 65])),
        "session.allowed_tools[1]",
        "",
    ),
    ("ResetSession", session_api.ResetSessionRequest(session_id="s", reason="r" * 10_000), "reason", ""),
]


@pytest.mark.parametrize(("method", "request_", "field", "reason"), NASTY, ids=[f"{m}:{f}" for m, _, f, _ in NASTY])
async def test_nasty_requests_are_invalid_argument_naming_the_field(
    channel: grpc.aio.Channel, stub: Stub, method: str, request_: Message, field: str, reason: str
) -> None:
    session = await create_session(stub)
    descriptor = request_.DESCRIPTOR
    # Requests that address a session address a real one, so that nothing but the bad field can refuse them.
    for name in ("session_id", "source_session_id"):
        if name in descriptor.fields_by_name and getattr(request_, name) == "s":
            setattr(request_, name, session.identity.session_id)
    error = await call(channel, method, request_)
    assert_named(error, field, reason or "INVALID_ARGUMENT")
    assert len(error.message) < 300, error.message  # a short prefix of any value, never the value
    assert "kkkkk" not in error.message  # nor any part of a secret
