"""Request decoding (api/decoding.py) and the JSON limits (domain/json_values.py) on their own: descriptor
driven checks of enums (repeated and map-valued too), Struct/Value content and well-known types; the
depth limit against the deepest response messages clients decode; quoting of client values."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, struct_pb2
from google.protobuf.message import Message

from general_agent.v1 import event_pb2, hook_registration_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.api.decoding import InvalidRequest, check_request, decode_request
from general_agent_server.domain.errors import ErrorCode, ServiceError, quoted
from general_agent_server.domain.json_values import MAX_JSON_DEPTH, json_depth, parse_json


def violation(error: ServiceError) -> tuple[str, str, str]:
    (v,) = error.field_violations
    return error.reason, v.field, v.description


def refused(message: Message) -> tuple[str, str, str]:
    with pytest.raises(ServiceError) as caught:
        check_request(message)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    return violation(caught.value)


def _test_messages() -> dict[str, type[Message]]:
    """A file the API does not have (yet): repeated and map-valued enums, messages in maps."""
    proto = descriptor_pb2.FileDescriptorProto(name="decoding_test.proto", package="t", syntax="proto3")
    proto.dependency.append("google/protobuf/struct.proto")
    color = proto.enum_type.add(name="Color")
    color.value.add(name="COLOR_UNSPECIFIED", number=0)
    color.value.add(name="COLOR_RED", number=1)
    F = descriptor_pb2.FieldDescriptorProto
    leaf = proto.message_type.add(name="Leaf")
    leaf.field.add(name="colors", number=1, type=F.TYPE_ENUM, type_name=".t.Color", label=F.LABEL_REPEATED)
    leaf.field.add(name="data", number=2, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Struct")
    root = proto.message_type.add(name="Root")
    for name, value_type, type_name, number in (
        ("by_name", F.TYPE_ENUM, ".t.Color", 1),
        ("leaves", F.TYPE_MESSAGE, ".t.Leaf", 2),
    ):
        entry = root.nested_type.add(name=f"{name.title().replace('_', '')}Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        entry.field.add(name="value", number=2, type=value_type, type_name=type_name, label=F.LABEL_OPTIONAL)
        root.field.add(
            name=name, number=number, type=F.TYPE_MESSAGE, type_name=f".t.Root.{entry.name}", label=F.LABEL_REPEATED
        )
    root.field.add(name="children", number=3, type=F.TYPE_MESSAGE, type_name=".t.Root", label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"t.{name}")) for name in ("Root", "Leaf")}


TEST_TYPES = _test_messages()


def test_repeated_and_map_valued_enums_and_recursive_messages_are_checked() -> None:
    root: Any = TEST_TYPES["Root"]()
    root.by_name["a"] = 1
    root.leaves["x"].colors.extend([1, 0])
    root.children.add().children.add().leaves["y"].colors.append(1)
    check_request(root)  # every value declared
    root.children[0].children[0].leaves["y"].colors.append(7)
    assert refused(root) == (
        "INVALID_ARGUMENT",
        "children[0].children[0].leaves[y].colors[1]",
        "7 is not a value of Color",
    )
    del root.children[:]
    root.by_name["b"] = -3
    assert refused(root)[1:] == ("by_name[b]", "-3 is not a value of Color")


def test_json_inside_a_repeated_map_value_names_the_field_holding_it() -> None:
    root: Any = TEST_TYPES["Root"]()
    root.leaves["k"].data.update({"a": {"b": [1, 2, math.inf]}})
    assert refused(root)[1:] == ("leaves[k].data", "holds inf at /a/b/2, which is not a finite JSON number")


def test_hook_binding_enums_are_invalid_hook() -> None:
    request = hook_registration_pb2.RegisterHooksRequest()
    request.registration.hooks.add(name=999)
    assert refused(request) == ("INVALID_HOOK", "registration.hooks[0].name", "999 is not a value of HookName")
    session = session_api.CreateSessionRequest()
    session.session.thinking.mode = 9  # type: ignore[assignment]
    assert refused(session) == ("INVALID_ARGUMENT", "session.thinking.mode", "9 is not a value of ThinkingMode")


def nested_value(depth: int) -> struct_pb2.Value:
    value: Any = 1
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    out = struct_pb2.Value()
    json_format.ParseDict(value, out)
    return out


def test_json_depth_limit_in_values() -> None:
    check_request(turn_api.SubmitHostedToolResultRequest(output=nested_value(MAX_JSON_DEPTH)))
    assert refused(turn_api.SubmitHostedToolResultRequest(output=nested_value(MAX_JSON_DEPTH + 1))) == (
        "INVALID_ARGUMENT",
        "output",
        f"is nested deeper than {MAX_JSON_DEPTH} levels",
    )
    request = turn_api.SubmitHostedToolResultRequest()
    request.details.struct_value.fields["n"].null_value = 3  # type: ignore[assignment]
    assert refused(request)[1:] == ("details", "holds null_value 3 at /n; only 0 is null")


def test_the_depth_limit_keeps_the_deepest_responses_decodable() -> None:
    """What the limit is for: a JSON value at the limit, handed back where responses nest it deepest, still
    decodes under the protobuf decoders' limit of 100 levels."""
    details = nested_value(MAX_JSON_DEPTH)
    event = event_pb2.SessionEvent(tool_result=event_pb2.ToolResultEvent(details=details))
    schema = struct_pb2.Struct()
    schema.update({"type": "object", "x": json.loads(json_format.MessageToJson(nested_value(MAX_JSON_DEPTH - 1)))})
    session = session_pb2.Session(hosted_tools=[hosted_tool_pb2.HostedToolDefinition(input_schema=schema)])
    for response in (
        run_session_api.RunSessionResponse(event=event),
        turn_api.SubmitHostedToolResultResponse(event=event),
        session_api.ListSessionsResponse(sessions=[session]),
    ):
        assert type(response).FromString(response.SerializeToString()) == response


def test_durations_and_timestamps_out_of_their_ranges() -> None:
    request = session_api.CreateSessionRequest()
    request.session.limits.run_deadline.seconds = 10**12
    assert refused(request)[1:] == ("session.limits.run_deadline", "is not a valid google.protobuf.Duration")
    request.session.limits.run_deadline.seconds, request.session.limits.run_deadline.nanos = 5, -1
    assert refused(request)[1] == "session.limits.run_deadline"
    request.session.limits.run_deadline.nanos = 0
    request.session.create_time.seconds = -(10**13)
    assert refused(request)[1:] == ("session.create_time", "is not a valid google.protobuf.Timestamp")


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x0a\xff\xff\xff\xff", "the bytes are not a valid protobuf encoding"),
        (b"\x0a\x02\xc3\x28", "a string field is not valid UTF-8"),
    ],
)
def test_undecodable_bytes_name_the_request_without_parser_internals(data: bytes, why: str) -> None:
    result = decode_request(session_api.GetSessionRequest, data)
    assert isinstance(result, InvalidRequest)
    assert violation(result.error) == ("INVALID_ARGUMENT", "GetSessionRequest", f"could not be decoded: {why}")
    assert decode_request(session_api.GetSessionRequest, b"\x0a\x01s") == session_api.GetSessionRequest(session_id="s")


@pytest.mark.parametrize(
    ("text", "description"),
    [
        ("NaN", "holds NaN, which is not a finite JSON number"),
        ('{"a": -Infinity}', "holds -Infinity, which is not a finite JSON number"),
        ("[1e999]", "holds 1e999, which is not a finite JSON number"),
        ("1" * 400, f"holds {'1' * 24}…, which is not a finite JSON number"),
        ("1" * 5000, f"holds {'1' * 24}…, which is not a finite JSON number"),
        ("[" * 50_000 + "]" * 50_000, f"is nested deeper than {MAX_JSON_DEPTH} levels"),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), f"is nested deeper than {MAX_JSON_DEPTH} levels"),
        ("{", "is not valid JSON: Expecting property name enclosed in double quotes at position 1"),
    ],
)
def test_parse_json_refuses_what_is_not_plain_bounded_json(text: str, description: str) -> None:
    with pytest.raises(ServiceError) as caught:
        parse_json("output_json", text)
    assert violation(caught.value) == ("INVALID_ARGUMENT", "output_json", description)


def test_parse_json_accepts_json_within_the_limits() -> None:
    deepest = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_depth(parse_json("f", deepest)) == MAX_JSON_DEPTH
    assert parse_json("f", '{"a": [1, 2.5e3, -0.0, "x", null, true]}') == {"a": [1, 2500.0, -0.0, "x", None, True]}


def test_quoted_shows_a_short_prefix_of_long_values() -> None:
    assert quoted("abc") == "'abc'"
    assert quoted("x" * 10_000) == f"'{'x' * 48}'… (10000 characters)"
    assert quoted("a\nb\x00") == "'a\\nb\\x00'"


def test_an_invalid_argument_error_without_a_field_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="field violation"):
        ServiceError(ErrorCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", "page_size: must not be negative")
    ServiceError(ErrorCode.NOT_FOUND, "SESSION_NOT_FOUND", "no field needed")
