"""Start-up recovery (spec 8.1): every run left RUNNING by a crash gets a terminal
run_finished{FAILED, INTERRUPTED}; its session becomes IDLE and the next turn works. Suspended runs
stay resumable. Nothing the crashed run did is re-run."""

from __future__ import annotations

from dataclasses import replace

from general_agent_server.core.clock import utcnow
from general_agent_server.core.errors import ErrorCode, ErrorDetail
from general_agent_server.core.events import RunFinished, RunOutcome, RunReason, SequencedEvent
from general_agent_server.core.runs import RunStatus
from general_agent_server.core.session import SessionState
from general_agent_server.store.port import SessionStore, WriteBatch

INTERRUPTED_MESSAGE = "the run was interrupted by a server restart"


async def recover_interrupted_runs(store: SessionStore, *, sequence_block: int) -> int:
    recovered = 0
    for run in await store.list_unfinished_runs():
        if run.status is RunStatus.SUSPENDED:
            continue
        session = await store.get_session(run.tenant, run.session_id)
        if session is None:
            continue
        now = utcnow()
        # Events of the crashed run may have been sent without being committed: skip every reserved number.
        sequence = session.sequence_reserved + 1
        event = SequencedEvent(
            sequence=sequence,
            session_id=run.session_id,
            run_id=run.run_id,
            create_time=now,
            body=RunFinished(
                outcome=RunOutcome.FAILED,
                reason=RunReason.INTERRUPTED,
                error=ErrorDetail(code=ErrorCode.UNAVAILABLE, reason="INTERRUPTED", message=INTERRUPTED_MESSAGE),
                usage=run.usage,
            ),
        )
        finished = replace(
            run,
            status=RunStatus.FINISHED,
            outcome=RunOutcome.FAILED,
            reason=RunReason.INTERRUPTED,
            last_sequence=sequence,
            finished_at=now,
        )
        state_changes = {}
        if session.active_run_id == run.run_id:
            state_changes = {"state": SessionState.IDLE, "active_run_id": ""}
        updated = replace(
            session,
            version=session.version + 1,
            update_time=now,
            last_sequence=sequence,
            sequence_reserved=sequence + sequence_block,
            **state_changes,  # type: ignore[arg-type]
        )
        await store.write(
            WriteBatch(tenant=run.tenant, session_id=run.session_id, session=updated, events=[event], runs=[finished])
        )
        recovered += 1
    return recovered
