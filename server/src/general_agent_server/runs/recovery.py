"""Recovery (docs/protocol.md, run outcomes): every run left RUNNING by a crash gets a terminal
run_finished{FAILED, INTERRUPTED}; each of its tool calls without a result gets a synthetic is_error result
(local tools are never re-run: the action may or may not have happened), and the model history gets the
round's results message so no tool_use is left without its tool_result. The session becomes IDLE and the
next turn works. Suspended runs stay resumable.

A run is repaired only under its session's lease (docs/architecture.md, "Replicas and leases"): a replica
takes it first, so the live run of another replica is never touched, and the run of a dead one is repaired
once its lease has expired (or at once by the same replica id restarting). Start-up, the periodic sweep of
sessions/ownership.py and the load of a session left RUNNING all come here."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.content import TextPart
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import EventBody, RunFinished, RunOutcome, RunReason, SequencedEvent
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
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.runs.results import resolved, result_entry, result_event, tool_result_block
from general_agent_server.store.port import SessionStore, WriteBatch

INTERRUPTED_MESSAGE = "the run was interrupted by a server restart"
INTERRUPTED_TOOL_MESSAGE = "interrupted by a server restart; the action may or may not have happened"


async def repair_abandoned_runs(
    store: SessionStore,
    *,
    owner: str,
    ttl_seconds: float,
    sequence_block: int,
    skip: Collection[tuple[str, str]] = (),
) -> int:
    """Repairs every unfinished, not suspended run whose session lease this replica can take (free, expired or
    its own from before a restart); sessions in `skip` (this replica's live runs) are left alone. Returns the
    number of runs repaired."""
    recovered = 0
    for run in await store.list_unfinished_runs():
        if run.status is RunStatus.SUSPENDED or (run.tenant, run.session_id) in skip:
            continue
        recovered += await repair_session(
            store, run.tenant, run.session_id, owner=owner, ttl_seconds=ttl_seconds, sequence_block=sequence_block
        )
    return recovered


async def repair_session(
    store: SessionStore, tenant: str, session_id: str, *, owner: str, ttl_seconds: float, sequence_block: int
) -> int:
    """Repairs the session's interrupted runs if its lease can be taken; the number repaired (0 while another
    replica holds the lease). The lease is released afterwards: the repaired session is idle.

    The lease is taken only for a session seen RUNNING *after* its lease was seen free. A live owner holds the
    lease from before its run is stored RUNNING until the run's terminal commit, so only an abandoned run
    passes; a caller working from an older read (the sweep's list, a cached copy) would otherwise take the
    lease of a run that has just ended, and the owner's next turn would be refused SESSION_BUSY for the
    moment it holds it."""
    if not await _abandoned(store, tenant, session_id, owner):
        return 0
    if not await store.acquire_lease(tenant, session_id, owner, ttl_seconds=ttl_seconds):
        return 0
    try:
        return await repair_leased(store, tenant, session_id, sequence_block)
    finally:
        await store.release_lease(tenant, session_id, owner)


async def _abandoned(store: SessionStore, tenant: str, session_id: str, owner: str) -> bool:
    """Whether the session's run is left RUNNING with no live lease (or this owner's own, from before a
    restart); read in this order (see repair_session)."""
    if await store.lease_holder(tenant, session_id) not in ("", owner):
        return False
    session = await store.get_session(tenant, session_id)
    return session is not None and session.state is SessionState.RUNNING


async def repair_leased(store: SessionStore, tenant: str, session_id: str, sequence_block: int) -> int:
    """Repairs the session's runs left RUNNING, with its lease held by the caller; the number repaired."""
    recovered = 0
    # Read under the lease: the owner may have finished the run before it let the lease go.
    for run in await store.list_runs(tenant, session_id):
        if run.status is not RunStatus.RUNNING:
            continue
        session = await store.get_session(tenant, session_id)
        if session is None:
            break
        await _recover(store, session, run, sequence_block)
        recovered += 1
    return recovered


class _Repair:
    """The events and transcript entries one interrupted run's repair commits, numbered after every sequence
    the crashed process reserved (its events may have been sent without being committed)."""

    def __init__(self, session: SessionRecord, run: RunRecord) -> None:
        self.run = run
        self.now = utcnow()
        self.next_sequence = session.sequence_reserved + 1
        self.events: list[SequencedEvent] = []
        self.transcript: list[TranscriptEntry] = []

    def stamp(self, body: RunFinished | EventBody) -> SequencedEvent:
        event = SequencedEvent(
            sequence=self.next_sequence,
            session_id=self.run.session_id,
            run_id=self.run.run_id,
            create_time=self.now,
            body=body,
        )
        self.next_sequence += 1
        self.events.append(event)
        return event

    def interrupt(self, call: ToolCallRecord) -> ToolCallRecord:
        """An unfinished call gets the synthetic is_error result; a local tool is never run again."""
        event = self.stamp(result_event(call, _SYNTHETIC))
        entry = result_entry(call, _SYNTHETIC)
        self.transcript.append(
            TranscriptEntry(timestamp=self.now, sequence=event.sequence, run_id=self.run.run_id, body=entry)
        )
        return resolved(call, _SYNTHETIC, ResolvedBy.INTERRUPTED, event.sequence)


_SYNTHETIC = CallResult(content=(TextPart(text=INTERRUPTED_TOOL_MESSAGE),), is_error=True)


async def _recover(store: SessionStore, session: SessionRecord, run: RunRecord, sequence_block: int) -> None:
    repair = _Repair(session, run)
    calls = await store.list_tool_calls(run.tenant, run.session_id, run.run_id)
    last_round = max((c.round_index for c in calls), default=-1)
    round_calls = [c for c in calls if c.round_index == last_round]
    done = [c if c.status is CallStatus.RESOLVED else repair.interrupt(c) for c in round_calls]
    history = await store.load_history(run.tenant, run.session_id)
    results = _results_message(history, done, run, last_round)
    finished = repair.stamp(
        RunFinished(
            outcome=RunOutcome.FAILED,
            reason=RunReason.INTERRUPTED,
            error=ErrorDetail(code=ErrorCode.UNAVAILABLE, reason="INTERRUPTED", message=INTERRUPTED_MESSAGE),
            usage=run.usage,
        )
    )
    finished_run = run.finished(RunOutcome.FAILED, RunReason.INTERRUPTED, sequence=finished.sequence, at=repair.now)
    updated = replace(
        session,
        version=session.version + 1,
        update_time=repair.now,
        last_sequence=finished.sequence,
        sequence_reserved=finished.sequence + sequence_block,
        history_message_count=len(history) + len(results),
    )
    if session.active_run_id == run.run_id:
        updated = replace(updated, state=SessionState.IDLE, active_run_id="", pending_call_ids=())
    await store.write(
        WriteBatch(
            tenant=run.tenant,
            session_id=run.session_id,
            session=updated,
            events=repair.events,
            transcript=repair.transcript,
            history=results,
            history_base=len(history),
            runs=[finished_run],
            tool_calls=[c for c in done if c.resolved_by is ResolvedBy.INTERRUPTED],
        )
    )


def _results_message(
    history: list[HistoryMessage], done: list[ToolCallRecord], run: RunRecord, last_round: int
) -> list[HistoryMessage]:
    """The results message of a round the crash left open, so no tool_use stays without its tool_result."""
    if not history or history[-1].role != "assistant":
        return []
    uses = [b for b in history[-1].content if b.get("type") == "tool_use"]
    if not uses:
        return []
    by_id = {c.call_id: c for c in done}
    blocks: list[dict[str, Any]] = []
    for position, block in enumerate(uses):
        record = by_id.get(str(block["id"])) or ToolCallRecord(
            tenant=run.tenant,
            session_id=run.session_id,
            run_id=run.run_id,
            round_index=last_round,
            position=position,
            call_id=str(block["id"]),
            tool_name=str(block.get("name", "")),
            input_json="{}",
            kind=CallKind.LOCAL,
            status=CallStatus.RESOLVED,
            result=_SYNTHETIC,
        )
        blocks.append(tool_result_block(record))
    return [HistoryMessage(role="user", content=tuple(blocks), run_id=run.run_id)]
