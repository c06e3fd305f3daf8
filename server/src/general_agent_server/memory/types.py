"""The memory subsystem's values (docs/memory.md): whose memory (Scope), what is stored (MemoryMessage), what
recall and the tools get back (MemoryHit), what a write answers (WriteResult), and the one failure type
(MemoryFailure), whose message is always scrubbed of secrets."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from general_agent_server.security.redaction import scrub

Role = Literal["user", "assistant", "tool"]
MAX_ERROR_CHARS = 240
MAX_REQUEST_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory: the session's tenant, its `memory.user_id` and `memory.agent_id`, and the conversation
    (the session id). Recall and the tools never reach memories of another (tenant, user, agent)."""

    tenant: str
    user_id: str
    agent_id: str
    conversation_id: str = ""

    @property
    def owner(self) -> tuple[str, str, str]:
        return (self.tenant, self.user_id, self.agent_id)

    def describe(self) -> str:
        return f"tenant={self.tenant} user={self.user_id} agent={self.agent_id}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # always a JSON string, as the gateway takes it


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryMessage:
    """One message as memory stores it: already converted and redacted. `native_id` is stable for the same
    message of the same run, so a write repeated after a crash is recognised; `turn_complete` is True on the
    assistant message that ends a completed turn, False on one that does not, None when unknown."""

    role: Role
    content: str
    timestamp_ms: int
    native_id: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    turn_complete: bool | None = None

    def wire(self) -> dict[str, Any]:
        """The agent-memory message shape of the EverMe gateway."""
        message: dict[str, Any] = {"role": self.role, "content": self.content, "timestamp": self.timestamp_ms}
        if self.tool_calls:
            message["toolCalls"] = [
                {"id": c.id, "type": "function", "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id:
            message["toolCallId"] = self.tool_call_id
        if self.role == "assistant" and self.turn_complete is not None:
            message["turnComplete"] = self.turn_complete
        return message

    def to_json(self) -> dict[str, Any]:
        return {**self.wire(), "nativeId": self.native_id}

    @staticmethod
    def from_json(value: dict[str, Any]) -> MemoryMessage:
        return MemoryMessage(
            role=value["role"],
            content=str(value.get("content", "")),
            timestamp_ms=int(value.get("timestamp", 0)),
            native_id=str(value.get("nativeId", "")),
            tool_calls=tuple(
                ToolCall(id=str(c["id"]), name=str(c["name"]), arguments=str(c["arguments"]))
                for c in value.get("toolCalls", ())
            ),
            tool_call_id=str(value.get("toolCallId", "")),
            turn_complete=value.get("turnComplete"),
        )


def native_id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


class HitKind(enum.Enum):
    TURN = "turn"
    EPISODE = "episode"
    PROFILE = "profile"
    RAW = "raw"
    CASE = "case"
    SKILL = "skill"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryHit:
    """One recalled memory. `text` is the short form recall renders, `detail` the whole of it (memory_get)."""

    id: str
    kind: HitKind
    text: str
    score: float | None = None
    conversation_id: str = ""
    timestamp_ms: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteResult:
    status: str
    message_count: int
    flushed: bool = False
    request_ids: tuple[str, ...] = ()


class FailureKind(enum.Enum):
    AUTH = "auth"
    TIMEOUT = "timeout"
    UPSTREAM = "upstream"
    NETWORK = "network"
    INVALID = "invalid"
    CONFIG = "config"


class MemoryFailure(Exception):
    """A backend failed. The message is scrubbed and at most 240 characters. `ambiguous` means the request
    may have reached the gateway (a POST whose answer was lost), so it must not be sent again blindly;
    `sent_batches` counts the batches of a split upload the gateway had accepted before this one failed."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        http_status: int = 0,
        code: int | None = None,
        request_id: str = "",
        ambiguous: bool = False,
        sent_batches: int = 0,
    ) -> None:
        text = scrub(message)
        if len(text) > MAX_ERROR_CHARS:
            text = text[: MAX_ERROR_CHARS - 1] + "…"
        super().__init__(text)
        self.kind = kind
        self.message = text
        self.http_status = http_status
        self.code = code
        self.request_id = request_id[:MAX_REQUEST_ID_CHARS]
        self.ambiguous = ambiguous
        self.sent_batches = sent_batches

    @property
    def retryable(self) -> bool:
        return self.kind not in (FailureKind.INVALID,) and not self.ambiguous

    def describe(self) -> str:
        extra = [f"errno={self.code}"] if self.code is not None else []
        if self.request_id:
            extra.append(f"requestId={self.request_id}")
        return f"{self.kind.value}: {self.message}" + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredTurn:
    """One turn of the local store, as inspection lists it."""

    id: str
    conversation_id: str
    turn: int
    timestamp_ms: int
    agent_id: str = ""
    messages: tuple[MemoryMessage, ...] = field(default_factory=tuple)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agentId": self.agent_id,
            "conversationId": self.conversation_id,
            "turn": self.turn,
            "timestampMs": self.timestamp_ms,
            "messages": [{"role": m.role, "content": m.content} for m in self.messages],
        }


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
