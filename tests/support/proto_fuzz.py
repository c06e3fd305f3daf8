"""Requests generated from the protobuf descriptors: every enum field of a request message (for the
out-of-range test) and hypothesis strategies for whole requests (for the property test). Nothing here
names a field of the API by hand except the few string fields that address a session, so that new
fields and new RPCs are covered as the proto grows."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from general_agent.v1 import agent_service_pb2

SERVICE = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"]
JSON_TYPES = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})
HOOK_BINDING = "general_agent.v1.HookBinding"
MAP_KEY = "k"


def message_class(descriptor: Descriptor) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(descriptor)
    return cls


def is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type is not None
        and bool(field.message_type.GetOptions().map_entry)
    )


def element_field(field: FieldDescriptor) -> FieldDescriptor:
    """The field of a map's values, or the field itself."""
    if is_map(field):
        assert field.message_type is not None
        value: FieldDescriptor = field.message_type.fields_by_name["value"]
        return value
    return field


# ---------------------------------------------------------------------- enum sites


@dataclass(frozen=True)
class EnumSite:
    """One enum field reachable from a request: the fields leading to it, and the path the server must
    name (inside a Struct or Value, the outermost JSON field)."""

    steps: tuple[FieldDescriptor, ...]
    path: str
    hook: bool

    @property
    def enum_values(self) -> frozenset[int]:
        enum = element_field(self.steps[-1]).enum_type
        assert enum is not None
        return frozenset(enum.values_by_number)


def enum_sites(descriptor: Descriptor) -> list[EnumSite]:
    return list(_sites(descriptor, "", (), None, frozenset({descriptor.full_name})))


def _sites(
    descriptor: Descriptor,
    prefix: str,
    steps: tuple[FieldDescriptor, ...],
    json_path: str | None,
    visiting: frozenset[str],
) -> Iterator[EnumSite]:
    for field in descriptor.fields:
        element = element_field(field)
        path = prefix + field.name + (f"[{MAP_KEY}]" if is_map(field) else "[0]" if field.is_repeated else "")
        if element.type == FieldDescriptor.TYPE_ENUM:
            yield EnumSite((*steps, field), json_path or path, descriptor.full_name == HOOK_BINDING)
        elif element.type == FieldDescriptor.TYPE_MESSAGE and element.message_type is not None:
            name = element.message_type.full_name
            if name in visiting:
                continue
            inner_json = json_path or (path if name in JSON_TYPES else None)
            yield from _sites(element.message_type, path + ".", (*steps, field), inner_json, visiting | {name})


def with_enum(request: Message, site: EnumSite, number: int) -> Message:
    """`request` with the enum at `site` set to `number` (one element or entry where repeated)."""
    message: Any = request
    for field in site.steps[:-1]:
        container = getattr(message, field.name)
        if is_map(field):
            message = container[MAP_KEY]
        elif field.is_repeated:
            message = container.add()
        else:
            message = container
    last = site.steps[-1]
    if is_map(last):
        getattr(message, last.name)[MAP_KEY] = number
    elif last.is_repeated:
        getattr(message, last.name).append(number)
    else:
        setattr(message, last.name, number)
    return request


def out_of_range(values: frozenset[int]) -> list[int]:
    return [max(values) + 1, min(values) - 1]


# ---------------------------------------------------------------------- calls


def method_path(method: MethodDescriptor) -> str:
    return f"/{SERVICE.full_name}/{method.name}"


def callable_for(channel: grpc.aio.Channel | grpc.Channel, method: MethodDescriptor, *, raw: bool = False) -> Any:
    """A generic multi-callable for `method` (requests as bytes when `raw`)."""
    request = None if raw else message_class(method.input_type).SerializeToString
    response = message_class(method.output_type).FromString
    kind = (method.client_streaming, method.server_streaming)
    factory = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, True): channel.stream_stream,
        (True, False): channel.stream_unary,
    }[kind]
    return factory(method_path(method), request_serializer=request, response_deserializer=response)


# ---------------------------------------------------------------------- strategies

NASTY_STRINGS = (
    "",
    "a",
    "-",
    "../../etc/passwd",
    "127.0.0.1:1",
    "x" * 10_000,
    "é\u0000\ud7ff\U0001f600",
    "NaN",
    "1e999",
    "[" * 50_000 + "]" * 50_000,
    '{"type": "object", "properties": {"a": {"type": "string"}}}',
)
JSON_TEXTS = (
    "null",
    "NaN",
    "Infinity",
    "-1e999",
    "1" * 5000,
    '"text"',
    '{"a": [1, 2.5, true, null]}',
    "[" * 30 + "]" * 30,
    "[" * 50_000 + "]" * 50_000,
    "{",
    '{"type": "object"}',
)

StringChooser = Callable[[FieldDescriptor], "st.SearchStrategy[str] | None"]


def _floats() -> st.SearchStrategy[float]:
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -0.0]))


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Plain Python JSON-like values, NaN and infinities included (Value's number_value is a double)."""
    leaves = st.one_of(st.none(), st.booleans(), _floats(), st.text(max_size=8))
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
        max_leaves=max_leaves,
    )


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@st.composite
def _json_message(draw: st.DrawFn, descriptor: Descriptor) -> Message:
    """A Struct, Value or ListValue: JSON values, sometimes nested past the server's depth limit."""
    value = draw(st.one_of(json_values(), st.sampled_from([_deep(30), [[[[]]]]])))
    name = descriptor.full_name
    if name.endswith("Struct") and not isinstance(value, dict):
        value = {"v": value}
    if name.endswith("ListValue") and not isinstance(value, list):
        value = [value]
    out: Any = message_class(descriptor)()
    if name.endswith("Value") and not name.endswith("ListValue"):
        _fill_value(out, value)
    else:
        out.update(value) if isinstance(value, dict) else out.extend(value)
    result: Message = out
    return result


def _fill_value(out: Any, value: Any) -> None:
    if value is None:
        out.null_value = 0
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, float):
        out.number_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, dict):
        out.struct_value.update(value)
    else:
        out.list_value.extend(value)


def _scalar(field: FieldDescriptor, strings: StringChooser) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        chosen = strings(field)
        if chosen is not None:
            return chosen
        if field.name.endswith("_json"):
            return st.sampled_from(JSON_TEXTS)
        return st.one_of(st.text(max_size=12), st.sampled_from(NASTY_STRINGS))
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=16), st.just(b"\x89PNG\r\n\x1a\n" + bytes(8)))
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _floats() if kind == FieldDescriptor.TYPE_DOUBLE else st.floats(width=32)
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = sorted(field.enum_type.values_by_number)
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    bits = 32 if kind in _INT32 else 64
    if kind in _UNSIGNED:
        return st.integers(0, 2**bits - 1)
    return st.one_of(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1), st.sampled_from([0, 1, -1, 5]))


_INT32 = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_FIXED32,
}
_UNSIGNED = {
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_FIXED64,
}


def _element(field: FieldDescriptor, strings: StringChooser, depth: int) -> st.SearchStrategy[Any]:
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return _scalar(field, strings)
    assert field.message_type is not None
    if field.message_type.full_name in JSON_TYPES:
        return _json_message(field.message_type)
    if field.message_type.full_name == "google.protobuf.Duration":
        return st.builds(
            message_class(field.message_type),
            seconds=st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([0, 1, 30])),
            nanos=st.integers(-(2**31), 2**31 - 1),
        )
    return messages(field.message_type, strings, depth + 1)


def messages(
    descriptor: Descriptor, strings: StringChooser = lambda _: None, depth: int = 0
) -> st.SearchStrategy[Message]:
    """Messages of `descriptor` with any subset of fields set (at most one per oneof); nesting is
    bounded so that recursive types end."""
    cls = message_class(descriptor)
    if depth > 4:
        return st.just(cls())
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        element = _element(element_field(field), strings, depth)
        if is_map(field):
            assert field.message_type is not None
            key = _scalar(field.message_type.fields_by_name["key"], strings)
            fields[field.name] = st.dictionaries(key, element, max_size=2)
        elif field.is_repeated:
            fields[field.name] = st.lists(element, max_size=2)
        else:
            fields[field.name] = element
    return st.builds(_assemble, st.just(cls), st.fixed_dictionaries({}, optional=fields))


def _assemble(cls: type[Message], values: dict[str, Any]) -> Message:
    """Sets the drawn fields; of a oneof, only the first member drawn (a proto3 `optional` field is a
    oneof of one, which needs no choosing)."""
    message: Any = cls()
    chosen_oneofs: set[str] = set()
    for name, value in values.items():
        field: Any = cls.DESCRIPTOR.fields_by_name[name]
        oneof = field.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            if oneof.name in chosen_oneofs:
                continue
            chosen_oneofs.add(oneof.name)
        _set(message, field, value)
    result: Message = message
    return result


def _set(message: Any, field: FieldDescriptor, value: Any) -> None:
    target = getattr(message, field.name)
    if is_map(field):
        for key, item in value.items():
            if isinstance(item, Message):
                target[key].CopyFrom(item)
            else:
                target[key] = item
    elif field.is_repeated:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value:
                target.add().CopyFrom(item)
        else:
            target.extend(value)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        target.CopyFrom(value)
    else:
        setattr(message, field.name, value)
