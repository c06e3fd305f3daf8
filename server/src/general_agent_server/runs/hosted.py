"""Resolving the pending hosted calls of a suspended run: a submit, a timeout, or a stop (docs/protocol.md,
hosted tools). A non-final resolution commits the call's result and a new run_finished{SUSPENDED} with what is
still pending; the final one commits the result and RUNNING, then continues the run in a new driver task.

Called only under the session's command lock, while the run has no task (it is suspended)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import RunFinished, RunOutcome, StopReason
from general_agent_server.domain.records import CallKind, CallResult, CallStatus, ResolvedBy, RunStatus, ToolCallRecord
from general_agent_server.domain.session import SessionState
from general_agent_server.model.port import Credential
from general_agent_server.runs.driver import RunDriver
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.results import resolved, result_entry, result_event
from general_agent_server.runs.state import ActiveRun, Resolution
from general_agent_server.security.redaction import redact


def unknown_call(call_id: str, session_id: str) -> ServiceError:
    return ServiceError(
        ErrorCode.NOT_FOUND,
        "UNKNOWN_TOOL_CALL",
        f"no hosted tool call {call_id!r} in session {session_id!r}",
        metadata={"call_id": call_id},
    )


async def find_call(host: RunHost, run: ActiveRun | None, call_id: str) -> ToolCallRecord:
    """The hosted call, from the current round or (already resolved) from the store."""
    record = next((r for r in run.round if r.call_id == call_id), None) if run is not None else None
    if record is not None:
        return record
    stored = await host.store.get_tool_call(host.tenant, host.session_id, call_id)
    if stored is None or stored.kind is not CallKind.HOSTED:
        raise unknown_call(call_id, host.session_id)
    return stored


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
    """Resolves one pending hosted call. The last resolution continues the run; a submit resolves the
    credential first, so that a missing one leaves the call pending."""
    result = redact(result)  # the host's answer reaches the model, hooks and the store only redacted
    record = await find_call(host, run, call_id)
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
    remaining = [r for r in run.pending() if r.call_id != call_id]
    if not remaining and credential is None and by is not ResolvedBy.SUBMIT:
        credential = host.credential()
    ledger = host.ledger
    event = ledger.stamp(run.run_id, result_event(record, result))
    done = resolved(record, result, by, event.sequence, payload)
    run.replace_call(done)
    host.deadlines.disarm(call_id)
    host.hooks.after_tool_call(run.run_id, record.tool_name, call_id, record.input_json, result)
    transcript = [ledger.entry(run.run_id, result_entry(record, result), event.sequence)]
    if remaining:
        still = tuple(r.call_id for r in remaining)
        suspended = ledger.stamp(
            run.run_id,
            RunFinished(
                outcome=RunOutcome.SUSPENDED,
                stop_reason=StopReason.TOOL_USE,
                pending_call_ids=still,
                usage=run.record.usage,
            ),
        )
        await ledger.commit(events=[event, suspended], transcript=transcript, tool_calls=[done], pending_call_ids=still)
        return Resolution(sequence=event.sequence)
    run.record = replace(run.record, status=RunStatus.RUNNING)
    run.credential = credential
    await ledger.commit(
        events=[event],
        transcript=transcript,
        tool_calls=[done],
        runs=[run.record],
        state=SessionState.RUNNING,
        pending_call_ids=(),
    )
    run.admitted.set()
    driver = RunDriver(host, run, resume_round=True)
    run.task = asyncio.create_task(driver.execute(), name=f"run-{run.run_id}")
    return Resolution(sequence=event.sequence, continued=run)
