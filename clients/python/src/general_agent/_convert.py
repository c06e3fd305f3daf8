"""Plain Python values to the request messages of ``general_agent.v1``: turn input, enums by name, JSON
values, durations. Keyword arguments of the client go through here so ordinary calls need no protobuf."""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from google.protobuf import duration_pb2, json_format, struct_pb2

from general_agent.v1 import approval_pb2, content_pb2, session_pb2, turn_pb2

ModeName: TypeAlias = Literal["GENERAL", "CODING"]
OnDisconnectName: TypeAlias = Literal["CANCEL", "CONTINUE"]
BusyPolicyName: TypeAlias = Literal["REJECT", "ENQUEUE", "INTERRUPT", "STEER"]
DecisionName: TypeAlias = Literal["APPROVE", "APPROVE_ALWAYS", "DENY"]
ThinkingName: TypeAlias = Literal["OFF", "ADAPTIVE", "BUDGET"]


@dataclass(frozen=True, slots=True)
class Image:
    """An inline image for turn input: raw bytes (not base64) of a png, jpeg, gif or webp."""

    mime_type: str
    data: bytes

    @classmethod
    def from_path(cls, path: str | Path, mime_type: str | None = None) -> Image:
        """Reads an image file; the MIME type is guessed from the suffix unless given."""
        path = Path(path)
        guessed = mime_type or mimetypes.guess_type(path.name)[0]
        if not guessed or not guessed.startswith("image/"):
            raise ValueError(f"cannot tell the image type of {path.name!r}; pass mime_type=")
        return cls(mime_type=guessed, data=path.read_bytes())

    def to_proto(self) -> content_pb2.ContentPart:
        return content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type=self.mime_type, data=self.data))


InputPart: TypeAlias = str | Image | content_pb2.ContentPart
InputLike: TypeAlias = InputPart | Sequence[InputPart]
"""Turn input: a string, an :class:`Image`, a ``ContentPart``, or a list mixing them."""


def mode(value: ModeName | int) -> session_pb2.SessionMode.ValueType:
    if isinstance(value, str):
        try:
            return session_pb2.SessionMode.Value(f"SESSION_MODE_{value.upper()}")
        except ValueError:
            raise ValueError(f"mode must be 'GENERAL' or 'CODING', not {value!r}") from None
    return session_pb2.SessionMode.ValueType(value)


def busy_policy(value: BusyPolicyName) -> turn_pb2.BusyPolicy.ValueType:
    return turn_pb2.BusyPolicy.Value(f"BUSY_POLICY_{value}")


def on_disconnect(value: OnDisconnectName) -> turn_pb2.OnDisconnect.ValueType:
    return turn_pb2.OnDisconnect.Value(f"ON_DISCONNECT_{value}")


def decision(value: DecisionName | int) -> approval_pb2.ApprovalDecision.ValueType:
    if isinstance(value, str):
        try:
            return approval_pb2.ApprovalDecision.Value(f"APPROVAL_DECISION_{value.upper()}")
        except ValueError:
            raise ValueError(f"decision must be APPROVE, APPROVE_ALWAYS or DENY, not {value!r}") from None
    return approval_pb2.ApprovalDecision.ValueType(value)


def thinking(value: ThinkingName | None, budget_tokens: int = 0) -> session_pb2.ThinkingConfig | None:
    if value is None:
        return None
    return session_pb2.ThinkingConfig(
        mode=session_pb2.ThinkingMode.Value(f"THINKING_MODE_{value.upper()}"), budget_tokens=budget_tokens
    )


def duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    proto = duration_pb2.Duration()
    proto.FromNanoseconds(round(seconds * 1e9))
    return proto


def part(value: InputPart) -> content_pb2.ContentPart:
    if isinstance(value, str):
        return content_pb2.ContentPart(text=content_pb2.TextPart(text=value))
    if isinstance(value, Image):
        return value.to_proto()
    if isinstance(value, content_pb2.ContentPart):
        return value
    raise TypeError(f"turn input parts are str, Image or ContentPart, not {type(value).__name__}")


def parts(value: InputLike, images: Iterable[Image] = ()) -> list[content_pb2.ContentPart]:
    built = [part(value)] if isinstance(value, str | Image | content_pb2.ContentPart) else [part(p) for p in value]
    built.extend(image.to_proto() for image in images)
    return built


def struct(value: Mapping[str, Any] | None) -> struct_pb2.Struct | None:
    if value is None:
        return None
    proto = struct_pb2.Struct()
    proto.update(dict(value))
    return proto


def struct_value(value: Any) -> struct_pb2.Value:
    """Any JSON value as a ``google.protobuf.Value``."""
    proto = struct_pb2.Value()
    json_format.Parse(to_json(value), proto)
    return proto


def to_json(value: Any) -> str:
    """Exact JSON for ``*_json`` fields (integers above 2^53 survive, unlike a Struct's doubles)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_default)


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def from_struct(value: struct_pb2.Struct | struct_pb2.Value) -> Any:
    return json_format.MessageToDict(value) if isinstance(value, struct_pb2.Struct) else _value(value)


def _value(value: struct_pb2.Value) -> Any:
    return json.loads(json_format.MessageToJson(value)) if value.WhichOneof("kind") else None
