"""JSON codecs for what the store keeps as documents (events, transcript entries, history messages,
session config). pydantic's TypeAdapter does the work on the plain dataclasses, so there is no
hand-written (de)serialiser to drift from the types."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Generic, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.errors import ErrorDetail
from general_agent_server.domain.events import EventBody
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import RunRecord, ToolCallRecord
from general_agent_server.domain.session import ForkOrigin, SessionConfig, Usage, UsageSnapshot
from general_agent_server.domain.transcript import TranscriptBody

_CONFIG = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

T = TypeVar("T")


class JsonCodec(Generic[T]):
    """Encodes one type to compact JSON text and back."""

    def __init__(self, adapter: TypeAdapter[T]) -> None:
        self._adapter = adapter

    def dumps(self, value: T) -> str:
        return self._adapter.dump_json(value).decode()

    def loads(self, text: str | bytes) -> T:
        return self._adapter.validate_json(text)

    def to_jsonable(self, value: T) -> Any:
        return self._adapter.dump_python(value, mode="json")


def json_codec(tp: Any) -> JsonCodec[Any]:
    # Unions and containers take the config (bytes as base64 for image parts nested in them); pydantic
    # refuses a config for a bare dataclass, and those carry no bytes.
    if dataclasses.is_dataclass(tp):
        return JsonCodec(TypeAdapter(tp))
    return JsonCodec(TypeAdapter(tp, config=_CONFIG))


EVENT_BODY: JsonCodec[EventBody] = json_codec(Annotated[EventBody, Field(discriminator="kind")])
TRANSCRIPT_BODY: JsonCodec[TranscriptBody] = json_codec(Annotated[TranscriptBody, Field(discriminator="kind")])
CONTENT_PARTS: JsonCodec[tuple[ContentPart, ...]] = json_codec(
    tuple[Annotated[ContentPart, Field(discriminator="kind")], ...]
)
HISTORY_MESSAGE: JsonCodec[HistoryMessage] = json_codec(HistoryMessage)
SESSION_CONFIG: JsonCodec[SessionConfig] = json_codec(SessionConfig)
USAGE: JsonCodec[Usage] = json_codec(Usage)
USAGE_SNAPSHOT: JsonCodec[UsageSnapshot] = json_codec(UsageSnapshot)
FORK_ORIGIN: JsonCodec[ForkOrigin] = json_codec(ForkOrigin)
ERROR_DETAIL: JsonCodec[ErrorDetail] = json_codec(ErrorDetail)
RUN_RECORD: JsonCodec[RunRecord] = json_codec(RunRecord)
# A bare dataclass gets no config, but the record nests image bytes: wrap it in a tuple so the base64
# setting applies.
_TOOL_CALLS: JsonCodec[tuple[ToolCallRecord]] = json_codec(tuple[ToolCallRecord])


class _ToolCallCodec:
    def dumps(self, value: ToolCallRecord) -> str:
        return _TOOL_CALLS.dumps((value,))

    def loads(self, text: str | bytes) -> ToolCallRecord:
        return _TOOL_CALLS.loads(text)[0]


TOOL_CALL = _ToolCallCodec()
