"""Scalars, request digests and JSON values: Timestamp, Duration, idempotency keys, Struct and Value."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from general_agent_server.domain.validation import check_token
from general_agent_server.sessions.idempotency import Idempotency


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    set_timestamp(ts, value)
    return ts


def set_timestamp(ts: timestamp_pb2.Timestamp, value: datetime) -> None:
    """Fills `ts` in place (a Timestamp field of a message being built)."""
    whole, micros = divmod(int(value.timestamp() * 1_000_000), 1_000_000)
    ts.seconds = whole
    ts.nanos = micros * 1000


def seconds(value: duration_pb2.Duration, present: bool) -> float | None:
    return value.seconds + value.nanos / 1e9 if present else None


def duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def body_hash(request: Message) -> str:
    """Digest of a request without its request_id, for idempotent replays."""
    copy = type(request)()
    copy.CopyFrom(request)
    if "request_id" in copy.DESCRIPTOR.fields_by_name:
        copy.ClearField("request_id")
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def idempotency(request: Message, field: str = "request_id") -> Idempotency | None:
    request_id = getattr(request, "request_id", "")
    if not request_id:
        return None
    check_token(field, request_id)
    return Idempotency(request_id=request_id, body_hash=body_hash(request))


def json_text(value: Message) -> dict[str, Any]:
    result: dict[str, Any] = json_format.MessageToDict(value, preserving_proto_field_name=True)
    return result


def struct_from_json(text: str) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    if text:
        loaded = json.loads(text)
        if isinstance(loaded, dict):
            s.update(loaded)
    return s


def value_from_json(text: str) -> struct_pb2.Value | None:
    if not text:
        return None
    v = struct_pb2.Value()
    json_format.Parse(text, v)
    return v


def struct_from_dict(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out
