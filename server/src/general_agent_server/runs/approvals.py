"""Tool approvals (docs/protocol.md, "Tool approvals"): which calls wait for a person before they run, and what
the person's answer does.

A call needs approval when a before_tool_call handler asks for it (`requireApproval`; the first handler that
asks wins and is named as the asker) or when the session's policy names it (a tool name, `mutating`, `all`;
the server's `approval_policy` when the session sets none). A blocked or invalid call is never asked; a tool
approved for the rest of the session (APPROVE_ALWAYS) is not asked again; a subagent child, which has no one to
ask, is blocked instead (fail-closed).

Answers: APPROVE and APPROVE_ALWAYS make the call runnable with the shown or the edited (re-validated) input — a
hosted call is then exposed with hosted_tool_call; DENY resolves it as an error the model sees. Every answer
emits approval_resolved. An identical retry replays; a different answer to an answered call is refused."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from general_agent_server.domain.content import TextPart
from general_agent_server.domain.errors import ErrorCode, ServiceError, invalid_argument
from general_agent_server.domain.events import ApprovalRequested, ApprovalResolved, EventBody, HostedToolCall
from general_agent_server.domain.records import (
    Approval,
    ApprovalDecision,
    ApprovalSeverity,
    CallResult,
    CallStatus,
    ResolvedBy,
    ToolCallRecord,
)
from general_agent_server.domain.session import SessionRecord
from general_agent_server.tools.runtime import ToolKind, ToolSpec

DENIED = "The user denied this tool call."
TIMED_OUT = "The approval of this tool call timed out."


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalAnswer:
    decision: ApprovalDecision
    edited_input_json: str = ""
    message: str = ""
    timed_out: bool = False

    def digest(self) -> str:
        text = json.dumps([self.decision.value, self.edited_input_json, self.message], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def policy_asks(entries: tuple[str, ...], spec: ToolSpec) -> bool:
    if "all" in entries or spec.name in entries:
        return True
    mutating = spec.kind in (ToolKind.BUILTIN, ToolKind.MCP) and not spec.read_only
    return "mutating" in entries and mutating


def approval_for(
    record: SessionRecord,
    spec: ToolSpec,
    requested: dict[str, Any] | None,
    *,
    default_policy: tuple[str, ...],
    default_timeout: float,
    max_timeout: float,
    now: datetime,
) -> Approval | None:
    """The approval a call waits for, or None when it runs without one."""
    if spec.name in record.approved_tools:
        return None
    if requested is not None:
        return _from_hook(spec, requested, default_timeout=default_timeout, max_timeout=max_timeout, now=now)
    policy = record.config.approval_policy if record.config.approval_policy is not None else default_policy
    if not policy_asks(policy, spec):
        return None
    mutating = spec.kind in (ToolKind.BUILTIN, ToolKind.MCP) and not spec.read_only
    return Approval(
        title=f"Approve {spec.name}?",
        severity=ApprovalSeverity.WARNING if mutating else ApprovalSeverity.INFO,
        requested_by="policy",
        deadline=now + timedelta(seconds=min(default_timeout, max_timeout)),
    )


def _from_hook(
    spec: ToolSpec, requested: dict[str, Any], *, default_timeout: float, max_timeout: float, now: datetime
) -> Approval:
    """A handler's requireApproval, in-process (`severity: "warning"`, `timeout: 3.0`) or remote (the proto's JSON
    form: `APPROVAL_SEVERITY_WARNING`, `"3s"`)."""
    severity = str(requested.get("severity") or "info").lower().removeprefix("approval_severity_")
    behavior = str(requested.get("timeoutBehavior") or "deny").lower().removeprefix("approval_timeout_behavior_")
    return Approval(
        title=str(requested.get("title") or f"Approve {spec.name}?")[:500],
        description=str(requested.get("description") or "")[:4000],
        severity=ApprovalSeverity(severity)
        if severity in {s.value for s in ApprovalSeverity}
        else ApprovalSeverity.INFO,
        requested_by=f"hook:{requested.get('pluginId', '')}",
        allow_on_timeout=behavior == "allow",
        deadline=now + timedelta(seconds=min(_seconds(requested.get("timeout")) or default_timeout, max_timeout)),
    )


def _seconds(value: Any) -> float:
    if isinstance(value, int | float) and value > 0:
        return float(value)
    if isinstance(value, str) and value.endswith("s"):
        try:
            return max(0.0, float(value[:-1]))
        except ValueError:
            return 0.0
    return 0.0


def requested_event(record: ToolCallRecord) -> ApprovalRequested:
    approval = record.approval
    assert approval is not None
    return ApprovalRequested(
        call_id=record.call_id,
        tool_name=record.tool_name,
        input_json=record.input_json,
        title=approval.title,
        description=approval.description,
        severity=approval.severity.value,
        deadline=approval.deadline,
        requested_by=approval.requested_by,
        allow_on_timeout=approval.allow_on_timeout,
    )


def check_answerable(record: ToolCallRecord, answer: ApprovalAnswer) -> bool:
    """True for an identical retry of the answer given (replay); raises for a call that cannot take this answer."""
    approval = record.approval
    if approval is None:
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            "TOOL_CALL_ALREADY_RESOLVED",
            f"tool call {record.call_id!r} does not wait for an approval",
            metadata={"call_id": record.call_id, "resolved_by": (record.resolved_by or ResolvedBy.EXECUTED).value},
        )
    if approval.decision is not None:
        if approval.payload_hash == answer.digest() and not answer.timed_out:
            return True
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            "TOOL_CALL_ALREADY_RESOLVED",
            f"the approval of tool call {record.call_id!r} was already answered",
            metadata={"call_id": record.call_id, "resolved_by": "APPROVAL", "decision": approval.decision.value},
        )
    if record.status is not CallStatus.AWAITING_APPROVAL:
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            "TOOL_CALL_ALREADY_RESOLVED",
            f"tool call {record.call_id!r} was already resolved",
            metadata={"call_id": record.call_id, "resolved_by": (record.resolved_by or ResolvedBy.STOP).value},
        )
    return False


def edited_input(answer: ApprovalAnswer, record: ToolCallRecord, validation_error: str | None) -> str:
    """The input the call runs with: the shown one, or the edited one once it parses and validates."""
    if answer.decision is ApprovalDecision.DENY or not answer.edited_input_json:
        return record.input_json
    if validation_error is not None:
        raise invalid_argument("edited_input", validation_error)
    return json.dumps(json.loads(answer.edited_input_json), separators=(",", ":"))


def parse_edited(answer: ApprovalAnswer) -> Any:
    if not answer.edited_input_json:
        return None
    try:
        value = json.loads(answer.edited_input_json)
    except ValueError:
        raise invalid_argument("edited_input_json", "is not valid JSON") from None
    if not isinstance(value, dict):
        raise invalid_argument("edited_input_json", "must be a JSON object")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Answered:
    """What one answer changes: the call as it is now, the events to commit, and whether it was denied."""

    record: ToolCallRecord
    events: list[EventBody]
    denied: CallResult | None = None


def answer_call(
    record: ToolCallRecord,
    answer: ApprovalAnswer,
    input_json: str,
    *,
    hosted_deadline: datetime | None,
    sequence_of: int,
) -> Answered:
    """The call after the answer (`sequence_of` is the approval_resolved event's sequence, stamped by the caller)."""
    approval = record.approval
    assert approval is not None
    decision = answer.decision
    answered = replace(
        approval,
        decision=decision,
        timed_out=answer.timed_out,
        payload_hash=answer.digest(),
        resolve_sequence=sequence_of,
    )
    if decision is ApprovalDecision.DENY:
        text = answer.message or (TIMED_OUT if answer.timed_out else DENIED)
        result = CallResult(content=(TextPart(text=text),), is_error=True)
        return Answered(record=replace(record, approval=answered), events=[], denied=result)
    runnable = replace(record, status=CallStatus.PENDING, input_json=input_json, approval=answered)
    events: list[EventBody] = []
    if hosted_deadline is not None:
        runnable = replace(runnable, deadline=hosted_deadline)
        events.append(
            HostedToolCall(
                call_id=record.call_id, tool_name=record.tool_name, input_json=input_json, deadline=hosted_deadline
            )
        )
    return Answered(record=runnable, events=events)


def resolved_event(record: ToolCallRecord, answer: ApprovalAnswer, input_json: str) -> ApprovalResolved:
    return ApprovalResolved(
        call_id=record.call_id,
        decision=answer.decision.value,
        input_json="" if answer.decision is ApprovalDecision.DENY else input_json,
        timed_out=answer.timed_out,
    )


def timeout_answer(record: ToolCallRecord) -> ApprovalAnswer:
    approval = record.approval
    allow = approval is not None and approval.allow_on_timeout
    return ApprovalAnswer(decision=ApprovalDecision.APPROVE if allow else ApprovalDecision.DENY, timed_out=True)
