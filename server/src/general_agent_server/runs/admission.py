"""The admission of a run: one commit holds the run row, the system-prompt and user-message transcript entries,
the user message in the model history and run_started. Before it, session_start fires for the first turn of
the session in this process, and the model hooks are asked, so run_started names the model the run uses.

With the stop flag set the run ends at once: exactly run_started, turn_complete{stop_requested} and
run_finished{STOPPED}; the message goes to the transcript, not to the model history."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.events import (
    RunFinished,
    RunOutcome,
    RunReason,
    RunStarted,
    SequencedEvent,
    StopReason,
    TurnComplete,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import RunRecord, RunStatus
from general_agent_server.domain.session import SessionState
from general_agent_server.domain.transcript import MessageEntry, SystemPromptEntry, TranscriptEntry
from general_agent_server.exports.event_log import EventLog
from general_agent_server.model.port import Credential
from general_agent_server.model.request_builder import user_content_blocks
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.run_hooks import MODEL_HOOKS, ask_model_hooks, prompt_text
from general_agent_server.runs.state import ActiveRun, TurnRequest
from general_agent_server.sessions.ledger import SessionLedger


@dataclass(frozen=True, kw_only=True, slots=True)
class PreparedAdmission:
    run: ActiveRun
    started: SequencedEvent
    transcript: list[TranscriptEntry]
    user_message: HistoryMessage
    # The transcript entries passed the write-path hooks already (before the model hooks, in hook order).
    filtered: bool

    async def commit(self, ledger: SessionLedger, *, take_lease: bool = False, publish: bool = True) -> None:
        """`take_lease`: the session's lease is taken by this commit (sessions/turn_admission.py). `publish=False`:
        the caller publishes run_started (ledger.commit)."""
        await ledger.commit(
            events=[self.started],
            transcript=self.transcript,
            transcript_filtered=self.filtered,
            history=[self.user_message],
            runs=[self.run.record],
            take_lease=take_lease,
            publish=publish,
            state=SessionState.RUNNING,
            active_run_id=self.run.run_id,
        )

    async def stopped_at_start(self, ledger: SessionLedger) -> None:
        run = self.run
        complete = ledger.stamp(run.run_id, TurnComplete(stop_reason=StopReason.STOP_REQUESTED))
        finished = ledger.stamp(
            run.run_id,
            RunFinished(
                outcome=RunOutcome.STOPPED, reason=RunReason.STOP_REQUESTED, stop_reason=StopReason.STOP_REQUESTED
            ),
        )
        run.record = run.record.finished(
            RunOutcome.STOPPED, RunReason.STOP_REQUESTED, sequence=finished.sequence, at=finished.create_time
        )
        await ledger.commit(events=[self.started, complete, finished], transcript=self.transcript, runs=[run.record])
        run.finished.set()


async def prepare_admission(
    host: RunHost, turn: TurnRequest, credential: Credential, event_log: EventLog | None
) -> PreparedAdmission:
    ledger, hooks = host.ledger, host.hooks
    record = ledger.record
    started_at = utcnow()  # the run's deadline counts from here, hooks included
    run_id = str(uuid.uuid4())
    model_ref = record.config.model_ref or host.settings.default_model
    transcript = [
        ledger.entry(run_id, SystemPromptEntry(prompt=record.config.system_prompt, model_ref=model_ref)),
        ledger.entry(run_id, MessageEntry(content=turn.parts)),
    ]
    hooks.begin_run()
    origin = record.forked_from
    hooks.session_start(
        run_id, resumed_from=origin.session_id if origin is not None else (host.session_id if ledger.history else "")
    )
    answers = None
    if hooks.wants(MODEL_HOOKS) and not record.stop_requested:
        # Hook order: the admission's transcript writes, then the model hooks; run_started, committed with those
        # writes, then names the model the run really uses.
        transcript = await hooks.filter_transcript(transcript)
        answers = await ask_model_hooks(
            hooks, run_id, prompt_text(turn.parts), ledger.history, model_ref, budget=host.settings.run_deadline
        )
        model_ref = answers.model_ref
    started = ledger.stamp(run_id, RunStarted(trigger=turn.trigger, request_id=turn.request_id, model_ref=model_ref))
    run_record = RunRecord(
        tenant=host.tenant,
        session_id=host.session_id,
        run_id=run_id,
        trigger=turn.trigger,
        status=RunStatus.RUNNING,
        started_at=started_at,
        first_sequence=started.sequence,
        model_ref=model_ref,
        request_id=turn.request_id,
        body_hash=turn.body_hash,
    )
    if event_log is not None:
        event_log.query_started(host.tenant, host.session_id, run_id, turn.parts)
    return PreparedAdmission(
        run=ActiveRun(
            run_id=run_id, record=run_record, model_ref=model_ref, credential=credential, model_hooks=answers
        ),
        started=started,
        transcript=[_admitted_entry(entry, started.sequence, model_ref) for entry in transcript],
        user_message=HistoryMessage(role="user", content=user_content_blocks(turn.parts), run_id=run_id),
        filtered=answers is not None,
    )


def _admitted_entry(entry: TranscriptEntry, sequence: int, model_ref: str) -> TranscriptEntry:
    """An admission entry numbered with run_started, the system prompt entry naming the model used."""
    body = replace(entry.body, model_ref=model_ref) if isinstance(entry.body, SystemPromptEntry) else entry.body
    return replace(entry, sequence=sequence, body=body)
