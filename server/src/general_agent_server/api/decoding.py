"""Request decoding: the bytes of a request become either the message or an InvalidRequest carrying the
INVALID_ARGUMENT error to answer, never an exception (grpc answers a deserialiser's exception UNKNOWN with
the parser's message). A decoded request is checked against its descriptor, so that what protobuf
accepts but the API cannot mean is refused in one place, with the field named:

- enum values the proto does not declare (proto3 enums are open: any int32 decodes), reason
  `INVALID_HOOK` inside hook bindings and `INVALID_ARGUMENT` elsewhere;
- `google.protobuf.Struct`/`Value`/`ListValue` content that is not JSON: NaN or infinite numbers, an
  undeclared `null_value`, nesting deeper than MAX_JSON_DEPTH (domain/json_values.py);
- `google.protobuf.Duration` and `Timestamp` values outside the ranges their definitions allow.

Field paths follow BadRequest's convention: `a.b[2].c`, map entries as `labels[key]`. A violation inside
a Struct or Value names the field that holds it, and the description says where inside it is.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from general_agent_server.domain.errors import ServiceError, clipped, invalid_argument
from general_agent_server.domain.json_values import MAX_JSON_DEPTH

_STRUCT = "google.protobuf.Struct"
_VALUE = "google.protobuf.Value"
_LIST = "google.protobuf.ListValue"
_JSON_TYPES = frozenset({_STRUCT, _VALUE, _LIST})
_DURATION = "google.protobuf.Duration"
_TIMESTAMP = "google.protobuf.Timestamp"
_HOOK_MESSAGES = frozenset({"general_agent.v1.HookBinding"})

# The ranges google/protobuf/duration.proto and timestamp.proto define.
_MAX_DURATION_SECONDS = 315_576_000_000
_MIN_TIMESTAMP_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z

# What a field needs: "enum", "json", "duration", "timestamp" or "message" (a message to descend into).
_Plan = dict[str, str]


logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InvalidRequest:
    """What decoding returns for a request it refuses; the handler answers with `error`. `message` is
    the decoded request when only the checks refused it (a RunSession command_result echoes its id)."""

    error: ServiceError
    message: Message | None = None


def decode_request(message_class: type[Message], data: bytes) -> Message | InvalidRequest:
    try:
        message = message_class.FromString(data)
    except Exception as exc:  # DecodeError, or whatever else the parser raises on hostile bytes
        return InvalidRequest(_undecodable(message_class.DESCRIPTOR.name, exc))
    try:
        check_request(message)
    except ServiceError as error:
        return InvalidRequest(error, message)
    return message


def _undecodable(message_name: str, exc: Exception) -> ServiceError:
    """The parser's own message names internals (upb option names): it goes to the debug log only."""
    logger.debug("undecodable %s: %s", message_name, exc, extra={"category": "system"})
    text = str(exc)
    if "UTF-8" in text:
        why = "a string field is not valid UTF-8"
    elif "Depth" in text:
        why = "messages are nested more than 100 levels deep"
    else:
        why = "the bytes are not a valid protobuf encoding"
    return invalid_argument(message_name, f"could not be decoded: {why}")


def check_request(message: Message) -> None:
    """Raises INVALID_ARGUMENT (with a BadRequest field violation) for the first problem found."""
    _check_message(message, "", hook=False)


@functools.cache
def _plan(descriptor: Descriptor) -> _Plan:
    """The fields of `descriptor` that can hold something to check; messages without any are skipped."""
    return _build_plan(descriptor, set())


def _build_plan(descriptor: Descriptor, visiting: set[str]) -> _Plan:
    visiting.add(descriptor.full_name)
    plan: _Plan = {}
    for field in descriptor.fields:
        kind = _kind(_value_field(field), visiting)
        if kind:
            plan[field.name] = kind
    visiting.discard(descriptor.full_name)
    return plan


def _kind(field: FieldDescriptor, visiting: set[str]) -> str:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return "enum"
    message_type = field.message_type
    if field.type != FieldDescriptor.TYPE_MESSAGE or message_type is None:
        return ""
    name = message_type.full_name
    if name in _JSON_TYPES:
        return "json"
    if name == _DURATION:
        return "duration"
    if name == _TIMESTAMP:
        return "timestamp"
    # A message type being planned further up can recur: descend into it, its own plan decides.
    if name in visiting or _build_plan(message_type, visiting):
        return "message"
    return ""


def _value_field(field: FieldDescriptor) -> FieldDescriptor:
    """For a map field, the field of its values; else the field itself."""
    if _is_map(field) and field.message_type is not None:
        value: FieldDescriptor = field.message_type.fields_by_name["value"]
        return value
    return field


def _is_map(field: FieldDescriptor) -> bool:
    message_type = field.message_type
    return message_type is not None and field.is_repeated and bool(message_type.GetOptions().map_entry)


def _items(field: FieldDescriptor, value: Any, path: str) -> list[tuple[str, Any]]:
    """(path, item) for each element of a field's value: one for a singular field, one per element of a
    repeated field (`path[i]`) or entry of a map (`path[key]`)."""
    if _is_map(field):
        return [(f"{path}[{clipped(str(key))}]", value[key]) for key in value]
    if field.is_repeated:
        return [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    return [(path, value)]


def _check_message(message: Message, prefix: str, *, hook: bool) -> None:
    descriptor = message.DESCRIPTOR
    plan = _plan(descriptor)
    if not plan:
        return
    hook = hook or descriptor.full_name in _HOOK_MESSAGES
    for field, value in message.ListFields():
        kind = plan.get(field.name)
        if not kind:
            continue
        element = _value_field(field)
        for path, item in _items(field, value, prefix + field.name):
            if kind == "enum":
                _check_enum(element, item, path, hook=hook)
            elif kind == "json":
                _check_json(item, path)
            elif kind == "duration":
                _check_duration(item, path)
            elif kind == "timestamp":
                _check_timestamp(item, path)
            else:
                _check_message(item, path + ".", hook=hook)


def _check_enum(field: FieldDescriptor, number: int, path: str, *, hook: bool) -> None:
    enum = field.enum_type
    if enum is not None and number not in enum.values_by_number:
        raise invalid_argument(
            path, f"{number} is not a value of {enum.name}", reason="INVALID_HOOK" if hook else "INVALID_ARGUMENT"
        )


def _check_json(root: Message, path: str) -> None:
    """Walks a Struct, Value or ListValue iteratively (its nesting is what is being limited)."""
    stack: list[tuple[Any, int, str]] = [(root, 0, "")]
    while stack:
        message, depth, where = stack.pop()
        name = message.DESCRIPTOR.full_name
        if name in (_STRUCT, _LIST):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise invalid_argument(path, f"is nested deeper than {MAX_JSON_DEPTH} levels")
            if name == _STRUCT:
                stack.extend((message.fields[key], depth, f"{where}/{clipped(key)}") for key in message.fields)
            else:
                stack.extend((item, depth, f"{where}/{index}") for index, item in enumerate(message.values))
            continue
        kind = message.WhichOneof("kind")
        at = where or "/"
        if kind == "number_value" and not math.isfinite(message.number_value):
            raise invalid_argument(path, f"holds {message.number_value} at {at}, which is not a finite JSON number")
        if kind == "null_value" and message.null_value != 0:
            raise invalid_argument(path, f"holds null_value {message.null_value} at {at}; only 0 is null")
        if kind in ("struct_value", "list_value"):
            stack.append((getattr(message, kind), depth, where))


def _check_duration(duration: Any, path: str) -> None:
    seconds, nanos = duration.seconds, duration.nanos
    if (
        abs(seconds) > _MAX_DURATION_SECONDS
        or abs(nanos) > 999_999_999
        or (seconds > 0 and nanos < 0)
        or (seconds < 0 and nanos > 0)
    ):
        raise invalid_argument(path, "is not a valid google.protobuf.Duration")


def _check_timestamp(timestamp: Any, path: str) -> None:
    seconds, nanos = timestamp.seconds, timestamp.nanos
    if not _MIN_TIMESTAMP_SECONDS <= seconds <= _MAX_TIMESTAMP_SECONDS or not 0 <= nanos <= 999_999_999:
        raise invalid_argument(path, "is not a valid google.protobuf.Timestamp")
