"""Resolving what a suspended run waits on: a hosted call's result (a submit, a timeout) and a call's approval
(an answer, a timeout) (docs/protocol.md, hosted tools and tool approvals). A resolution that leaves the run
still waiting commits and announces a new run_finished{SUSPENDED} with what is still pending; the one that
leaves nothing to wait for commits RUNNING and continues the run in a new driver task.

Called only under the session's command lock, while the run has no task (it is suspended)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import RunFinished, RunOutcome, SequencedEvent, StopReason
from general_agent_server.domain.records import (
    ApprovalDecision,
    CallKind,
    CallResult,
    CallStatus,
    ResolvedBy,
    RunStatus,
    ToolCallRecord,
)
from general_agent_server.domain.session import SessionState
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.model.port import Credential
from general_agent_server.runs.approvals import (
    ApprovalAnswer,
    answer_call,
    check_answerable,
    edited_input,
    parse_edited,
    resolved_event,
)
from general_agent_server.runs.driver import RunDriver
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.results import resolved, result_entry, result_event
from general_agent_server.runs.state import ActiveRun, Resolution
from general_agent_server.security.redaction import redact


def unknown_call(call_id: str, session_id: str) -> ServiceError:
    return ServiceError(
        ErrorCode.NOT_FOUND,
        "UNKNOWN_TOOL_CALL",
        f"no tool call {call_id!r} waits in session {session_id!r}",
        metadata={"call_id": call_id},
    )


def approval_pending(call_id: str) -> ServiceError:
    return ServiceError(
        ErrorCode.FAILED_PRECONDITION,
        "APPROVAL_PENDING",
        f"tool call {call_id!r} waits for its approval; submit its result once it is approved",
        metadata={"call_id": call_id},
    )


async def find_call(host: RunHost, run: ActiveRun | None, call_id: str, *, hosted: bool) -> ToolCallRecord:
    """The call, from the current round or (already resolved) from the store."""
    record = next((r for r in run.round if r.call_id == call_id), None) if run is not None else None
    if record is None:
        record = await host.store.get_tool_call(host.tenant, host.session_id, call_id)
    if record is None or (hosted and record.kind is not CallKind.HOSTED) or (not hosted and record.approval is None):
        raise unknown_call(call_id, host.session_id)
    return record


async def resolve_hosted(
    host: RunHost,
    run: ActiveRun | None,
    call_id: str,
    result: CallResult,
    by: ResolvedBy,
    *,
    payload: str,
    credential: Credential | None,
) -> Resolution:
    """Resolves one pending hosted call. A submit resolves the credential first, so that a missing one leaves the
    call pending."""
    result = redact(result)  # the host's answer reaches the model, hooks and the store only redacted
    record = await find_call(host, run, call_id, hosted=True)
    if record.status is CallStatus.AWAITING_APPROVAL:
        raise approval_pending(call_id)
    if record.status is CallStatus.RESOLVED:
        if by is ResolvedBy.SUBMIT and record.resolved_by is ResolvedBy.SUBMIT and record.payload_hash == payload:
            return Resolution(sequence=record.resolve_sequence, replay=True)
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            "TOOL_CALL_ALREADY_RESOLVED",
            f"hosted tool call {call_id!r} was already resolved",
            metadata={"call_id": call_id, "resolved_by": (record.resolved_by or ResolvedBy.SUBMIT).value},
        )
    if run is None:
        raise ServiceError(ErrorCode.INTERNAL, "INTERNAL", f"pending call {call_id!r} without an active run")
    ledger = host.ledger
    event = ledger.stamp(run.run_id, result_event(record, result))
    done = resolved(record, result, by, event.sequence, payload)
    run.replace_call(done)
    host.deadlines.disarm(call_id)
    host.hooks.after_tool_call(run.run_id, record.tool_name, call_id, record.input_json, result)
    transcript = [ledger.entry(run.run_id, result_entry(record, result), event.sequence)]
    continued = await settle(host, run, [event], transcript, [done], credential)
    return Resolution(sequence=event.sequence, continued=continued)


async def resolve_approval(
    host: RunHost,
    run: ActiveRun | None,
    call_id: str,
    answer: ApprovalAnswer,
    *,
    credential: Credential | None,
) -> Resolution:
    """Answers one call's approval (see runs/approvals.py)."""
    record = await find_call(host, run, call_id, hosted=False)
    if check_answerable(record, answer):
        assert record.approval is not None
        return Resolution(sequence=record.approval.resolve_sequence, replay=True)
    if run is None:
        raise ServiceError(ErrorCode.INTERNAL, "INTERNAL", f"call {call_id!r} awaits approval without an active run")
    arguments = parse_edited(answer) if answer.decision is not ApprovalDecision.DENY else None
    invalid = host.toolset().validation_error(record.tool_name, arguments) if arguments is not None else None
    input_json = edited_input(answer, record, invalid)
    ledger = host.ledger
    event = ledger.stamp(run.run_id, resolved_event(record, answer, input_json))
    approve_hosted = answer.decision is not ApprovalDecision.DENY and record.kind is CallKind.HOSTED
    spec = host.toolset().lookup(record.tool_name)
    deadline = utcnow() + host.hosted_deadline(spec) if approve_hosted and spec is not None else None
    answered = answer_call(record, answer, input_json, hosted_deadline=deadline, sequence_of=event.sequence)
    events, transcript, call = [event], [], answered.record
    if answered.denied is not None:
        failed = ledger.stamp(run.run_id, result_event(call, answered.denied))
        events.append(failed)
        transcript.append(ledger.entry(run.run_id, result_entry(call, answered.denied), failed.sequence))
        call = resolved(call, answered.denied, ResolvedBy.APPROVAL, failed.sequence)
        host.hooks.after_tool_call(run.run_id, call.tool_name, call_id, call.input_json, answered.denied)
    events.extend(ledger.stamp(run.run_id, body) for body in answered.events)
    run.replace_call(call)
    host.deadlines.disarm(call_id)
    if call.status is CallStatus.PENDING and call.kind is CallKind.HOSTED:
        host.deadlines.arm([call])
    changes: dict[str, Any] = {}
    if answer.decision is ApprovalDecision.APPROVE_ALWAYS and call.tool_name not in ledger.record.approved_tools:
        changes["approved_tools"] = (*ledger.record.approved_tools, call.tool_name)
    continued = await settle(host, run, events, transcript, [call], credential, changes)
    return Resolution(sequence=event.sequence, continued=continued)


async def settle(
    host: RunHost,
    run: ActiveRun,
    events: list[SequencedEvent],
    transcript: list[TranscriptEntry],
    calls: list[ToolCallRecord],
    credential: Credential | None,
    changes: dict[str, Any] | None = None,
) -> ActiveRun | None:
    """Commits a resolution: still suspended, with what remains; or RUNNING, continued in a new driver task."""
    ledger, changes = host.ledger, changes or {}
    remaining = run.waiting()
    if remaining:
        still = tuple(r.call_id for r in remaining)
        suspended = RunFinished(
            outcome=RunOutcome.SUSPENDED,
            stop_reason=StopReason.TOOL_USE,
            pending_call_ids=still,
            usage=run.record.usage,
        )
        events = [*events, ledger.stamp(run.run_id, suspended)]
        await ledger.commit(events=events, transcript=transcript, tool_calls=calls, pending_call_ids=still, **changes)
        return None
    if credential is None:
        credential = host.credential()
    # The run continues here: this replica takes the session's lease first (SESSION_BUSY if another holds it).
    await host.own_run()
    suspended_record = run.record
    run.record = replace(run.record, status=RunStatus.RUNNING)
    run.credential = credential
    try:
        await ledger.commit(
            events=events,
            transcript=transcript,
            tool_calls=calls,
            runs=[run.record],
            state=SessionState.RUNNING,
            pending_call_ids=(),
            **changes,
        )
    except BaseException:
        run.record = suspended_record
        host.disown_run()
        raise
    run.admitted.set()
    driver = RunDriver(host, run, resume_round=True)
    run.task = asyncio.create_task(driver.execute(), name=f"run-{run.run_id}")
    return run
