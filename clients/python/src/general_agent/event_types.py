"""Typed events: one frozen dataclass per ``SessionEvent`` variant, for ``match``.

Why dataclasses and not the protobuf messages: a host dispatches on the variant, and a class pattern over
a dataclass (``case AssistantDelta(text):``, ``case ToolCall(tool_name="write", input=args):``) reads the
payload directly, while the protobuf envelope puts it one ``oneof`` deeper, keeps JSON inputs as Struct
doubles (integers above 2^53 lose digits) and enums as numbers. The conversion is a few attribute copies per
event. Every event keeps ``sequence``, ``session_id`` and ``run_id`` (keyword-only, so positional patterns
match the payload), and ``raw``, the ``SessionEvent`` it came from, for anything not copied.

Forward compatibility: a variant newer than this client becomes :class:`UnknownEvent` (``kind == ""``);
skip it, and resume a watch after its ``sequence`` as after any other.

Example::

    match to_event(proto_event):
        case AssistantDelta(text):
            print(text, end="")
        case HostedToolCall(call_id=call_id, tool_name="weather", input=args):
            ...
        case RunFinished(outcome="FAILED", error=error):
            raise error
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeAlias

from google.protobuf import json_format

from general_agent.errors import AgentError
from general_agent.v1 import approval_pb2, content_pb2, event_pb2

__all__ = [
    "ApprovalRequested",
    "ApprovalResolved",
    "AssistantDelta",
    "CompactionFinished",
    "CompactionStarted",
    "Event",
    "HostedToolCall",
    "MessageInjected",
    "ReasoningDelta",
    "ReasoningEnd",
    "RunFinished",
    "RunStarted",
    "RunUsage",
    "SessionReset",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "TurnComplete",
    "UnknownEvent",
    "UsageUpdate",
    "run_text",
    "to_event",
]


@dataclass(frozen=True, slots=True)
class _Event:
    kind: ClassVar[str] = ""
    sequence: int = field(kw_only=True, default=0)
    session_id: str = field(kw_only=True, default="")
    run_id: str = field(kw_only=True, default="")
    raw: event_pb2.SessionEvent | None = field(kw_only=True, default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class RunStarted(_Event):
    kind: ClassVar[str] = "run_started"
    trigger: str = "TURN"
    request_id: str = ""
    model_ref: str = ""


@dataclass(frozen=True, slots=True)
class AssistantDelta(_Event):
    kind: ClassVar[str] = "assistant_delta"
    text: str = ""


@dataclass(frozen=True, slots=True)
class ReasoningDelta(_Event):
    kind: ClassVar[str] = "reasoning_delta"
    text: str = ""


@dataclass(frozen=True, slots=True)
class ReasoningEnd(_Event):
    kind: ClassVar[str] = "reasoning_end"


@dataclass(frozen=True, slots=True)
class ToolCall(_Event):
    kind: ClassVar[str] = "tool_call"
    call_id: str = ""
    tool_name: str = ""
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolResult(_Event):
    kind: ClassVar[str] = "tool_result"
    call_id: str = ""
    tool_name: str = ""
    text: str = ""
    details: Any = None


@dataclass(frozen=True, slots=True)
class ToolError(_Event):
    kind: ClassVar[str] = "tool_error"
    call_id: str = ""
    tool_name: str = ""
    error: str = ""
    details: Any = None


@dataclass(frozen=True, slots=True)
class HostedToolCall(_Event):
    """A call the host executes: answer it with a result or an error (``client.run`` does)."""

    kind: ClassVar[str] = "hosted_tool_call"
    call_id: str = ""
    tool_name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRequested(_Event):
    """A call that waits for a person: approve (optionally always, or with an edited input) or deny."""

    kind: ClassVar[str] = "approval_requested"
    call_id: str = ""
    tool_name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    description: str = ""
    severity: str = "INFO"
    requested_by: str = ""
    deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApprovalResolved(_Event):
    kind: ClassVar[str] = "approval_resolved"
    call_id: str = ""
    decision: str = ""
    input: dict[str, Any] | None = None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class UsageUpdate(_Event):
    """The usage snapshot after a model call: how full the context window is."""

    kind: ClassVar[str] = "usage_snapshot"
    used_input_tokens: int = 0
    context_window: int = 0
    used_pct: float = 0.0


@dataclass(frozen=True, slots=True)
class CompactionStarted(_Event):
    kind: ClassVar[str] = "compaction_started"
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CompactionFinished(_Event):
    kind: ClassVar[str] = "compaction_finished"
    reason: str = ""
    compacted: bool = False
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    error: AgentError | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class MessageInjected(_Event):
    kind: ClassVar[str] = "message_injected"
    text: str = ""


@dataclass(frozen=True, slots=True)
class TurnComplete(_Event):
    """The end of one model call (``stop_reason`` STOP, LENGTH, TOOL_USE, ERROR, ABORTED, STOP_REQUESTED)."""

    kind: ClassVar[str] = "turn_complete"
    stop_reason: str = ""
    error: AgentError | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class RunUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    model_calls: int = 0


@dataclass(frozen=True, slots=True)
class RunFinished(_Event):
    """``outcome`` COMPLETED, STOPPED or FAILED ends the run; SUSPENDED waits for ``pending_call_ids``."""

    kind: ClassVar[str] = "run_finished"
    outcome: str = ""
    reason: str = ""
    stop_reason: str = ""
    pending_call_ids: tuple[str, ...] = ()
    usage: RunUsage = field(default_factory=RunUsage)
    error: AgentError | None = field(default=None, compare=False)

    @property
    def terminal(self) -> bool:
        return self.outcome != "SUSPENDED"


@dataclass(frozen=True, slots=True)
class SessionReset(_Event):
    kind: ClassVar[str] = "session_reset"
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UnknownEvent(_Event):
    """A variant newer than this client: skip it."""


Event: TypeAlias = (
    RunStarted
    | AssistantDelta
    | ReasoningDelta
    | ReasoningEnd
    | ToolCall
    | ToolResult
    | ToolError
    | HostedToolCall
    | ApprovalRequested
    | ApprovalResolved
    | UsageUpdate
    | CompactionStarted
    | CompactionFinished
    | MessageInjected
    | TurnComplete
    | RunFinished
    | SessionReset
    | UnknownEvent
)


def _enum(enum_type: Any, value: int, prefix: str) -> str:
    if value == 0:
        return ""
    try:
        return str(enum_type.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(int(value))


def _json(exact: str, struct: Any) -> dict[str, Any]:
    if exact:
        loaded: dict[str, Any] = json.loads(exact)
        return loaded
    return json_format.MessageToDict(struct)


def _details(value: Any) -> Any:
    return json.loads(json_format.MessageToJson(value)) if value.WhichOneof("kind") else None


def _deadline(message: Any) -> datetime | None:
    return message.deadline.ToDatetime() if message.HasField("deadline") else None


def _error(message: Any) -> AgentError | None:
    return AgentError.from_status(message.error) if message.HasField("error") else None


def _text(parts: Iterable[content_pb2.ContentPart]) -> str:
    return "".join(part.text.text for part in parts if part.WhichOneof("part") == "text")


def _run_finished(m: event_pb2.RunFinishedEvent) -> dict[str, Any]:
    u = m.usage
    return {
        "outcome": _enum(event_pb2.RunOutcome, m.outcome, "RUN_OUTCOME_"),
        "reason": _enum(event_pb2.RunReason, m.reason, "RUN_REASON_"),
        "stop_reason": _enum(event_pb2.StopReason, m.stop_reason, "STOP_REASON_"),
        "pending_call_ids": tuple(m.pending_call_ids),
        "usage": RunUsage(
            u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens, u.model_calls
        ),
        "error": _error(m),
    }


_CONVERTERS: dict[str, tuple[type[_Event], Callable[[Any], dict[str, Any]]]] = {
    "run_started": (
        RunStarted,
        lambda m: {
            "trigger": _enum(event_pb2.RunTrigger, m.trigger, "RUN_TRIGGER_"),
            "request_id": m.request_id,
            "model_ref": m.model_ref,
        },
    ),
    "assistant_delta": (AssistantDelta, lambda m: {"text": m.text}),
    "reasoning_delta": (ReasoningDelta, lambda m: {"text": m.text}),
    "reasoning_end": (ReasoningEnd, lambda m: {}),
    "tool_call": (
        ToolCall,
        lambda m: {"call_id": m.call_id, "tool_name": m.tool_name, "input": _json(m.input_json, m.input)},
    ),
    "tool_result": (
        ToolResult,
        lambda m: {
            "call_id": m.call_id,
            "tool_name": m.tool_name,
            "text": _text(m.output),
            "details": json.loads(m.details_json) if m.details_json else _details(m.details),
        },
    ),
    "tool_error": (
        ToolError,
        lambda m: {"call_id": m.call_id, "tool_name": m.tool_name, "error": m.error, "details": _details(m.details)},
    ),
    "hosted_tool_call": (
        HostedToolCall,
        lambda m: {
            "call_id": m.call_id,
            "tool_name": m.tool_name,
            "input": _json(m.input_json, m.input),
            "deadline": _deadline(m),
        },
    ),
    "approval_requested": (
        ApprovalRequested,
        lambda m: {
            "call_id": m.call_id,
            "tool_name": m.tool_name,
            "input": _json(m.input_json, m.input),
            "title": m.title,
            "description": m.description,
            "severity": _enum(approval_pb2.ApprovalSeverity, m.severity, "APPROVAL_SEVERITY_") or "INFO",
            "requested_by": m.requested_by,
            "deadline": _deadline(m),
        },
    ),
    "approval_resolved": (
        ApprovalResolved,
        lambda m: {
            "call_id": m.call_id,
            "decision": _enum(approval_pb2.ApprovalDecision, m.decision, "APPROVAL_DECISION_"),
            "input": json.loads(m.input_json) if m.input_json else None,
            "timed_out": m.timed_out,
        },
    ),
    "usage_snapshot": (
        UsageUpdate,
        lambda m: {
            "used_input_tokens": m.used_input_tokens,
            "context_window": m.context_window,
            "used_pct": m.used_pct,
        },
    ),
    "compaction_started": (
        CompactionStarted,
        lambda m: {"reason": _enum(event_pb2.CompactionReason, m.reason, "COMPACTION_REASON_")},
    ),
    "compaction_finished": (
        CompactionFinished,
        lambda m: {
            "reason": _enum(event_pb2.CompactionReason, m.reason, "COMPACTION_REASON_"),
            "compacted": m.compacted,
            "tokens_after": m.tokens_after,
            "messages_before": m.messages_before,
            "messages_after": m.messages_after,
            "error": _error(m),
        },
    ),
    "message_injected": (MessageInjected, lambda m: {"text": _text(m.input)}),
    "turn_complete": (
        TurnComplete,
        lambda m: {"stop_reason": _enum(event_pb2.StopReason, m.stop_reason, "STOP_REASON_"), "error": _error(m)},
    ),
    "run_finished": (RunFinished, _run_finished),
    "session_reset": (SessionReset, lambda m: {"reason": m.reason}),
}


def to_event(event: event_pb2.SessionEvent) -> Event:
    """The typed event for a ``SessionEvent`` (:class:`UnknownEvent` for a variant newer than this client)."""
    variant = event.WhichOneof("event") or ""
    envelope: dict[str, Any] = {
        "sequence": event.sequence,
        "session_id": event.session_id,
        "run_id": event.run_id,
        "raw": event,
    }
    converter = _CONVERTERS.get(variant)
    if converter is None:
        return UnknownEvent(**envelope)
    cls, fields = converter
    typed: Event = cls(**fields(getattr(event, variant)), **envelope)  # type: ignore[assignment]
    return typed


def run_text(events: Iterable[Event]) -> str:
    """The assistant text of the events (their ``AssistantDelta`` texts, joined)."""
    return "".join(event.text for event in events if isinstance(event, AssistantDelta))
