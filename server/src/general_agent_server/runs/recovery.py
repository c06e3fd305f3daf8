"""Start-up recovery (spec 8.1): every run left RUNNING by a crash gets a terminal
run_finished{FAILED, INTERRUPTED}; each of its tool calls without a result gets a synthetic is_error result
(local tools are never re-run: the action may or may not have happened), and the model history gets the
round's results message so no tool_use is left without its tool_result. The session becomes IDLE and the
next turn works. Suspended runs stay resumable."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.content import TextPart
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import RunFinished, RunOutcome, RunReason, SequencedEvent, ToolError
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import (
    CallKind,
    CallResult,
    CallStatus,
    ResolvedBy,
    RunRecord,
    RunStatus,
    ToolCallRecord,
)
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.domain.transcript import ToolResultEntry, TranscriptEntry
from general_agent_server.runs.results import tool_result_block
from general_agent_server.store.port import SessionStore, WriteBatch

INTERRUPTED_MESSAGE = "the run was interrupted by a server restart"
INTERRUPTED_TOOL_MESSAGE = "interrupted by a server restart; the action may or may not have happened"


async def recover_interrupted_runs(store: SessionStore, *, sequence_block: int) -> int:
    recovered = 0
    for run in await store.list_unfinished_runs():
        if run.status is RunStatus.SUSPENDED:
            continue
        session = await store.get_session(run.tenant, run.session_id)
        if session is None:
            continue
        await _recover(store, session, run, sequence_block)
        recovered += 1
    return recovered


async def _recover(store: SessionStore, session: SessionRecord, run: RunRecord, sequence_block: int) -> None:
    now = utcnow()
    # Events of the crashed run may have been sent without being committed: skip every reserved number.
    next_sequence = session.sequence_reserved + 1
    events: list[SequencedEvent] = []
    transcript: list[TranscriptEntry] = []

    def stamp(body: RunFinished | ToolError) -> SequencedEvent:
        nonlocal next_sequence
        event = SequencedEvent(
            sequence=next_sequence, session_id=run.session_id, run_id=run.run_id, create_time=now, body=body
        )
        next_sequence += 1
        events.append(event)
        return event

    calls = await store.list_tool_calls(run.tenant, run.session_id, run.run_id)
    last_round = max((c.round_index for c in calls), default=-1)
    round_calls = [c for c in calls if c.round_index == last_round]
    synthetic = CallResult(content=(TextPart(text=INTERRUPTED_TOOL_MESSAGE),), is_error=True)
    resolved: list[ToolCallRecord] = []
    for call in round_calls:
        if call.status is CallStatus.RESOLVED:
            resolved.append(call)
            continue
        event = stamp(ToolError(call_id=call.call_id, tool_name=call.tool_name, error=INTERRUPTED_TOOL_MESSAGE))
        transcript.append(
            TranscriptEntry(
                timestamp=now,
                sequence=event.sequence,
                run_id=run.run_id,
                body=ToolResultEntry(
                    call_id=call.call_id, tool_name=call.tool_name, output=synthetic.content, is_error=True
                ),
            )
        )
        resolved.append(
            replace(
                call,
                status=CallStatus.RESOLVED,
                result=synthetic,
                resolved_by=ResolvedBy.INTERRUPTED,
                resolve_sequence=event.sequence,
            )
        )
    history = await store.load_history(run.tenant, run.session_id)
    repair: list[HistoryMessage] = []
    if history and history[-1].role == "assistant" and any(b.get("type") == "tool_use" for b in history[-1].content):
        by_id = {c.call_id: c for c in resolved}
        blocks: list[dict[str, Any]] = []
        for block in history[-1].content:
            if block.get("type") != "tool_use":
                continue
            record = by_id.get(str(block["id"]))
            if record is None:
                record = ToolCallRecord(
                    tenant=run.tenant,
                    session_id=run.session_id,
                    run_id=run.run_id,
                    round_index=last_round,
                    position=len(blocks),
                    call_id=str(block["id"]),
                    tool_name=str(block.get("name", "")),
                    input_json="{}",
                    kind=CallKind.LOCAL,
                    status=CallStatus.RESOLVED,
                    result=synthetic,
                )
            blocks.append(tool_result_block(record))
        repair.append(HistoryMessage(role="user", content=tuple(blocks), run_id=run.run_id))
    finished = stamp(
        RunFinished(
            outcome=RunOutcome.FAILED,
            reason=RunReason.INTERRUPTED,
            error=ErrorDetail(code=ErrorCode.UNAVAILABLE, reason="INTERRUPTED", message=INTERRUPTED_MESSAGE),
            usage=run.usage,
        )
    )
    finished_run = run.finished(RunOutcome.FAILED, RunReason.INTERRUPTED, sequence=finished.sequence, at=now)
    state_changes: dict[str, object] = {}
    if session.active_run_id == run.run_id:
        state_changes = {"state": SessionState.IDLE, "active_run_id": "", "pending_call_ids": ()}
    updated = replace(
        session,
        version=session.version + 1,
        update_time=now,
        last_sequence=finished.sequence,
        sequence_reserved=finished.sequence + sequence_block,
        history_message_count=len(history) + len(repair),
        **state_changes,  # type: ignore[arg-type]
    )
    await store.write(
        WriteBatch(
            tenant=run.tenant,
            session_id=run.session_id,
            session=updated,
            events=events,
            transcript=transcript,
            history=repair,
            history_base=len(history),
            runs=[finished_run],
            tool_calls=[c for c in resolved if c.resolved_by is ResolvedBy.INTERRUPTED],
        )
    )
