"""Session events: the hot path of every stream."""

from __future__ import annotations

from general_agent.v1 import approval_pb2, event_pb2
from general_agent_server.api.convert.content import parts_to_proto
from general_agent_server.api.convert.sessions import snapshot_to_proto, usage_to_proto
from general_agent_server.api.convert.values import set_timestamp, struct_from_json, timestamp, value_from_json
from general_agent_server.api.errors import status_from_detail
from general_agent_server.domain import events as ev

_TRIGGERS = {
    ev.RunTrigger.TURN: event_pb2.RUN_TRIGGER_TURN,
    ev.RunTrigger.ENQUEUED_TURN: event_pb2.RUN_TRIGGER_ENQUEUED_TURN,
    ev.RunTrigger.STEER: event_pb2.RUN_TRIGGER_STEER,
}
_STOP_REASONS = {
    ev.StopReason.STOP: event_pb2.STOP_REASON_STOP,
    ev.StopReason.LENGTH: event_pb2.STOP_REASON_LENGTH,
    ev.StopReason.TOOL_USE: event_pb2.STOP_REASON_TOOL_USE,
    ev.StopReason.ERROR: event_pb2.STOP_REASON_ERROR,
    ev.StopReason.ABORTED: event_pb2.STOP_REASON_ABORTED,
    ev.StopReason.STOP_REQUESTED: event_pb2.STOP_REASON_STOP_REQUESTED,
}
_OUTCOMES = {
    ev.RunOutcome.COMPLETED: event_pb2.RUN_OUTCOME_COMPLETED,
    ev.RunOutcome.SUSPENDED: event_pb2.RUN_OUTCOME_SUSPENDED,
    ev.RunOutcome.STOPPED: event_pb2.RUN_OUTCOME_STOPPED,
    ev.RunOutcome.FAILED: event_pb2.RUN_OUTCOME_FAILED,
}
_RUN_REASONS = {reason: event_pb2.RunReason.Value(f"RUN_REASON_{reason.value}") for reason in ev.RunReason}
_COMPACTION = {
    ev.CompactionReason.MANUAL_REQUEST: event_pb2.COMPACTION_REASON_MANUAL_REQUEST,
    ev.CompactionReason.TOKEN_THRESHOLD: event_pb2.COMPACTION_REASON_TOKEN_THRESHOLD,
    ev.CompactionReason.CONTEXT_OVERFLOW: event_pb2.COMPACTION_REASON_CONTEXT_OVERFLOW,
}


def event_to_proto(event: ev.SequencedEvent, out: event_pb2.SessionEvent | None = None) -> event_pb2.SessionEvent:
    """The hot path: called once per delta per stream, so it fills the message in place: `out` is the `event`
    field of the response being built (a message passed as a constructor argument is copied), or a new one."""
    if out is None:
        out = event_pb2.SessionEvent()
    out.sequence = event.sequence
    out.session_id = event.session_id
    out.run_id = event.run_id
    set_timestamp(out.create_time, event.create_time)
    body = event.body
    kind = body.kind
    if kind == "assistant_delta":
        out.assistant_delta.text = body.text  # type: ignore[union-attr]
    elif kind == "reasoning_delta":
        out.reasoning_delta.text = body.text  # type: ignore[union-attr]
    elif isinstance(body, ev.ReasoningEnd):
        out.reasoning_end.SetInParent()
    elif isinstance(body, ev.RunStarted):
        out.run_started.trigger = _TRIGGERS[body.trigger]
        out.run_started.request_id = body.request_id
        out.run_started.model_ref = body.model_ref
    elif isinstance(body, ev.ToolCall):
        out.tool_call.call_id = body.call_id
        out.tool_call.tool_name = body.tool_name
        out.tool_call.input_json = body.input_json
        out.tool_call.input.CopyFrom(struct_from_json(body.input_json))
    elif isinstance(body, ev.ToolResult):
        out.tool_result.call_id = body.call_id
        out.tool_result.tool_name = body.tool_name
        out.tool_result.output.extend(parts_to_proto(body.output))
        out.tool_result.details_json = body.details_json
        if (value := value_from_json(body.details_json)) is not None:
            out.tool_result.details.CopyFrom(value)
    elif isinstance(body, ev.ToolError):
        out.tool_error.call_id = body.call_id
        out.tool_error.tool_name = body.tool_name
        out.tool_error.error = body.error
        if (value := value_from_json(body.details_json)) is not None:
            out.tool_error.details.CopyFrom(value)
    elif isinstance(body, ev.HostedToolCall):
        out.hosted_tool_call.call_id = body.call_id
        out.hosted_tool_call.tool_name = body.tool_name
        out.hosted_tool_call.input_json = body.input_json
        out.hosted_tool_call.input.CopyFrom(struct_from_json(body.input_json))
        if body.deadline is not None:
            out.hosted_tool_call.deadline.CopyFrom(timestamp(body.deadline))
    elif isinstance(body, ev.UsageSnapshotEvent):
        out.usage_snapshot.CopyFrom(snapshot_to_proto(body.snapshot))
    elif isinstance(body, ev.CompactionStarted):
        out.compaction_started.reason = _COMPACTION[body.reason]
    elif isinstance(body, ev.CompactionFinished):
        f = out.compaction_finished
        f.reason = _COMPACTION[body.reason]
        f.tokens_after = body.tokens_after
        f.tokens_after_estimated = body.tokens_after_estimated
        f.compacted = body.compacted
        f.messages_before = body.messages_before
        f.messages_after = body.messages_after
        if body.error is not None:
            f.error.CopyFrom(status_from_detail(body.error))
    elif isinstance(body, ev.MessageInjected):
        out.message_injected.input.extend(parts_to_proto(body.input))
    elif isinstance(body, ev.TurnComplete):
        out.turn_complete.stop_reason = _STOP_REASONS[body.stop_reason]
        if body.error is not None:
            out.turn_complete.error.CopyFrom(status_from_detail(body.error))
    elif isinstance(body, ev.RunFinished):
        f2 = out.run_finished
        f2.outcome = _OUTCOMES[body.outcome]
        if body.reason is not None:
            f2.reason = _RUN_REASONS[body.reason]
        if body.stop_reason is not None:
            f2.stop_reason = _STOP_REASONS[body.stop_reason]
        if body.error is not None:
            f2.error.CopyFrom(status_from_detail(body.error))
        f2.pending_call_ids.extend(body.pending_call_ids)
        f2.usage.CopyFrom(usage_to_proto(body.usage))
    elif isinstance(body, ev.SessionResetEvent):
        out.session_reset.reason = body.reason
    elif isinstance(body, ev.ApprovalRequested):
        _approval_requested(out.approval_requested, body)
    elif isinstance(body, ev.ApprovalResolved):
        resolved = out.approval_resolved
        resolved.call_id = body.call_id
        resolved.decision = approval_pb2.ApprovalDecision.Value(f"APPROVAL_DECISION_{body.decision}")
        resolved.input_json = body.input_json
        resolved.timed_out = body.timed_out
    return out


def _approval_requested(out: event_pb2.ApprovalRequestedEvent, body: ev.ApprovalRequested) -> None:
    out.call_id = body.call_id
    out.tool_name = body.tool_name
    out.input_json = body.input_json
    out.input.CopyFrom(struct_from_json(body.input_json))
    out.title = body.title
    out.description = body.description
    out.severity = approval_pb2.ApprovalSeverity.Value(f"APPROVAL_SEVERITY_{body.severity.upper()}")
    out.requested_by = body.requested_by
    out.timeout_behavior = (
        approval_pb2.APPROVAL_TIMEOUT_BEHAVIOR_ALLOW
        if body.allow_on_timeout
        else approval_pb2.APPROVAL_TIMEOUT_BEHAVIOR_DENY
    )
    if body.deadline is not None:
        out.deadline.CopyFrom(timestamp(body.deadline))
