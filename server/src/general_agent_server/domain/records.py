"""Durable records of runs and idempotency keys."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.events import RunOutcome, RunReason, RunTrigger
from general_agent_server.domain.session import Usage


class RunStatus(enum.Enum):
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    FINISHED = "FINISHED"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    tenant: str
    session_id: str
    run_id: str
    trigger: RunTrigger
    status: RunStatus
    started_at: datetime
    first_sequence: int
    model_ref: str
    request_id: str = ""
    body_hash: str = ""
    outcome: RunOutcome | None = None
    reason: RunReason | None = None
    last_sequence: int = 0
    finished_at: datetime | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0

    def finished(self, outcome: RunOutcome, reason: RunReason | None, *, sequence: int, at: datetime) -> RunRecord:
        """This run as ended by its terminal run_finished at `sequence`."""
        return replace(
            self, status=RunStatus.FINISHED, outcome=outcome, reason=reason, last_sequence=sequence, finished_at=at
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyRecord:
    """A remembered mutating request: same key and body ⇒ the same result; another body ⇒ an error."""

    tenant: str
    rpc: str
    request_id: str
    body_hash: str
    result_json: str
    create_time: datetime


class CallKind(enum.Enum):
    LOCAL = "LOCAL"
    HOSTED = "HOSTED"


class CallStatus(enum.Enum):
    PENDING = "PENDING"  # a hosted call waiting for its result, or a local call about to run
    AWAITING_APPROVAL = "AWAITING_APPROVAL"  # waiting for a person's approval before it runs
    RESOLVED = "RESOLVED"


class ResolvedBy(enum.Enum):
    """How a tool call got its result, recorded with the payload hash so an identical retry of a submit is
    recognised (docs/protocol.md, "Hosted tools")."""

    EXECUTED = "EXECUTED"  # a local tool ran (or was refused: unknown, invalid, blocked)
    SUBMIT = "SUBMIT"
    TIMEOUT = "TIMEOUT"
    STOP = "STOP"
    SUPERSEDED = "SUPERSEDED"
    RESET = "RESET"
    INTERRUPTED = "INTERRUPTED"
    APPROVAL = "APPROVAL"  # a person denied it (or its approval timed out as a denial)


@dataclass(frozen=True, kw_only=True, slots=True)
class CallResult:
    """A tool call's result as stored: what the model sees and what hosts see."""

    content: tuple[ContentPart, ...]
    details_json: str = ""
    is_error: bool = False


class ApprovalDecision(enum.Enum):
    APPROVE = "APPROVE"
    APPROVE_ALWAYS = "APPROVE_ALWAYS"
    DENY = "DENY"


class ApprovalSeverity(enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, kw_only=True, slots=True)
class Approval:
    """A call's approval: what the person is asked, and (once answered) what they decided. `payload_hash`
    recognises an identical retry of the answer; `resolve_sequence` is its approval_resolved event."""

    title: str
    description: str = ""
    severity: ApprovalSeverity = ApprovalSeverity.INFO
    requested_by: str = "policy"
    allow_on_timeout: bool = False
    deadline: datetime | None = None
    decision: ApprovalDecision | None = None
    timed_out: bool = False
    payload_hash: str = ""
    resolve_sequence: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRecord:
    """One tool_use of one model call. Local and hosted calls share the shape, so a round's results are
    rebuilt in call order from these rows after a suspension or a restart."""

    tenant: str
    session_id: str
    run_id: str
    round_index: int
    position: int
    call_id: str
    tool_name: str
    input_json: str
    kind: CallKind
    status: CallStatus = CallStatus.PENDING
    deadline: datetime | None = None
    result: CallResult | None = None
    resolved_by: ResolvedBy | None = None
    payload_hash: str = ""
    resolve_sequence: int = 0
    approval: Approval | None = None
