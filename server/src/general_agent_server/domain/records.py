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
    PENDING = "PENDING"
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


@dataclass(frozen=True, kw_only=True, slots=True)
class CallResult:
    """A tool call's result as stored: what the model sees and what hosts see."""

    content: tuple[ContentPart, ...]
    details_json: str = ""
    is_error: bool = False


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
