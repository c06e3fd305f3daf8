"""Approval answers from their messages (ResolveApproval, the RunSession command)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from general_agent.v1 import approval_pb2
from general_agent_server.domain.errors import invalid_argument
from general_agent_server.domain.records import ApprovalDecision
from general_agent_server.runs.approvals import ApprovalAnswer

_DECISIONS = {
    approval_pb2.APPROVAL_DECISION_APPROVE: ApprovalDecision.APPROVE,
    approval_pb2.APPROVAL_DECISION_APPROVE_ALWAYS: ApprovalDecision.APPROVE_ALWAYS,
    approval_pb2.APPROVAL_DECISION_DENY: ApprovalDecision.DENY,
}


def answer_from_proto(request: Any, prefix: str = "") -> ApprovalAnswer:
    """From a ResolveApprovalRequest or a RunSessionResolveApproval (they share field names)."""
    decision = _DECISIONS.get(request.decision)
    if decision is None:
        raise invalid_argument(f"{prefix}decision", "is required: APPROVE, APPROVE_ALWAYS or DENY")
    edited = request.edited_input_json
    if not edited and request.HasField("edited_input"):
        edited = json_format.MessageToJson(request.edited_input, indent=None)
    if edited and decision is ApprovalDecision.DENY:
        raise invalid_argument(f"{prefix}edited_input", "applies to APPROVE and APPROVE_ALWAYS only")
    if len(request.message) > 16_000:
        raise invalid_argument(f"{prefix}message", "is longer than 16000 characters")
    return ApprovalAnswer(decision=decision, edited_input_json=edited, message=request.message)
