"""The session event union (event.proto; docs/protocol.md, "Turns and events"). Each variant is a frozen dataclass
tagged by `kind`; `SequencedEvent` is the envelope with the durable sequence."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.errors import ErrorDetail
from general_agent_server.domain.session import Usage, UsageSnapshot


class RunTrigger(enum.Enum):
    TURN = "TURN"
    ENQUEUED_TURN = "ENQUEUED_TURN"
    STEER = "STEER"


class StopReason(enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_USE = "tool_use"
    ERROR = "error"
    ABORTED = "aborted"
    STOP_REQUESTED = "stop_requested"


class RunOutcome(enum.Enum):
    COMPLETED = "COMPLETED"
    SUSPENDED = "SUSPENDED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class RunReason(enum.Enum):
    """Why a run stopped or failed (docs/protocol.md, run outcomes); the names match the ErrorInfo reasons."""

    STOP_REQUESTED = "STOP_REQUESTED"
    CANCELLED = "CANCELLED"
    SUPERSEDED = "SUPERSEDED"
    SESSION_RESET = "SESSION_RESET"
    SESSION_DELETED = "SESSION_DELETED"
    OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
    MODEL_REFUSAL = "MODEL_REFUSAL"
    PROVIDER_ERROR = "PROVIDER_ERROR"
    CONTEXT_OVERFLOW = "CONTEXT_OVERFLOW"
    HOOK_FAILED = "HOOK_FAILED"
    MAX_MODEL_CALLS = "MAX_MODEL_CALLS"
    MAX_TOOL_CALLS = "MAX_TOOL_CALLS"
    RUN_DEADLINE_EXCEEDED = "RUN_DEADLINE_EXCEEDED"
    NO_API_KEY = "NO_API_KEY"
    INTERRUPTED = "INTERRUPTED"
    INTERNAL = "INTERNAL"


class CompactionReason(enum.Enum):
    MANUAL_REQUEST = "manual_request"
    TOKEN_THRESHOLD = "token_threshold"  # noqa: S105  (a reason name, not a secret)
    CONTEXT_OVERFLOW = "context_overflow"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    trigger: RunTrigger
    request_id: str
    model_ref: str
    kind: Literal["run_started"] = "run_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class AssistantDelta:
    text: str
    kind: Literal["assistant_delta"] = "assistant_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasoningDelta:
    text: str
    kind: Literal["reasoning_delta"] = "reasoning_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasoningEnd:
    kind: Literal["reasoning_end"] = "reasoning_end"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    call_id: str
    tool_name: str
    input_json: str
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    call_id: str
    tool_name: str
    output: tuple[ContentPart, ...]
    details_json: str = ""
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolError:
    call_id: str
    tool_name: str
    error: str
    details_json: str = ""
    kind: Literal["tool_error"] = "tool_error"


@dataclass(frozen=True, kw_only=True, slots=True)
class HostedToolCall:
    call_id: str
    tool_name: str
    input_json: str
    deadline: datetime | None = None
    kind: Literal["hosted_tool_call"] = "hosted_tool_call"


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequested:
    call_id: str
    tool_name: str
    input_json: str
    title: str
    description: str = ""
    severity: str = "info"
    deadline: datetime | None = None
    requested_by: str = "policy"
    allow_on_timeout: bool = False
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalResolved:
    call_id: str
    decision: str
    input_json: str = ""
    timed_out: bool = False
    kind: Literal["approval_resolved"] = "approval_resolved"


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageSnapshotEvent:
    snapshot: UsageSnapshot
    kind: Literal["usage_snapshot"] = "usage_snapshot"


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionStarted:
    reason: CompactionReason
    kind: Literal["compaction_started"] = "compaction_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionFinished:
    reason: CompactionReason
    tokens_after: int = 0
    tokens_after_estimated: bool = False
    compacted: bool = False
    messages_before: int = 0
    messages_after: int = 0
    error: ErrorDetail | None = None
    kind: Literal["compaction_finished"] = "compaction_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageInjected:
    input: tuple[ContentPart, ...]
    kind: Literal["message_injected"] = "message_injected"


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnComplete:
    stop_reason: StopReason
    error: ErrorDetail | None = None
    kind: Literal["turn_complete"] = "turn_complete"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    outcome: RunOutcome
    reason: RunReason | None = None
    stop_reason: StopReason | None = None
    error: ErrorDetail | None = None
    pending_call_ids: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)
    kind: Literal["run_finished"] = "run_finished"

    @property
    def terminal(self) -> bool:
        return self.outcome is not RunOutcome.SUSPENDED


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionResetEvent:
    reason: str
    kind: Literal["session_reset"] = "session_reset"


EventBody = (
    RunStarted
    | AssistantDelta
    | ReasoningDelta
    | ReasoningEnd
    | ToolCall
    | ToolResult
    | ToolError
    | HostedToolCall
    | UsageSnapshotEvent
    | CompactionStarted
    | CompactionFinished
    | MessageInjected
    | TurnComplete
    | RunFinished
    | SessionResetEvent
    | ApprovalRequested
    | ApprovalResolved
)

# Deltas of one kind may be merged while a consumer lags (docs/protocol.md, "Turns and events").
COALESCIBLE_KINDS = frozenset({"assistant_delta", "reasoning_delta"})


@dataclass(frozen=True, kw_only=True, slots=True)
class SequencedEvent:
    """An event with its place in the session's log."""

    sequence: int
    session_id: str
    run_id: str
    create_time: datetime
    body: EventBody
