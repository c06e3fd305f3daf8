"""How a run ends: the one terminal commit (lead events and turn_complete, run_finished, the run row, the
session IDLE), then agent_end and llm_output. A run that stops or fails first closes its tool round, so the
history never holds a tool_use without its tool_result; partial text of an aborted model call goes to the
transcript marked aborted, never to the model history."""

from __future__ import annotations

import logging
from dataclasses import replace

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import (
    RunFinished,
    RunOutcome,
    RunReason,
    SequencedEvent,
    StopReason,
    TurnComplete,
)
from general_agent_server.domain.records import ResolvedBy, RunRecord
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.model_call import ModelCall
from general_agent_server.runs.run_hooks import fire_end_hooks
from general_agent_server.runs.state import ActiveRun, CallModel, DriverState, EndRun, Failed, stop_message
from general_agent_server.runs.tool_round import ToolRound
from general_agent_server.sessions.ledger import CommitRefused
from general_agent_server.store.port import StoreUnavailableError

logger = logging.getLogger(__name__)

# Reasons that end the model call in flight, so its turn_complete comes with the run's end.
_CLOSE_MODEL_CALL = (RunReason.PROVIDER_ERROR, RunReason.MODEL_REFUSAL, RunReason.OUTPUT_TRUNCATED)


class Endings:
    def __init__(self, host: RunHost, run: ActiveRun, state: DriverState, rounds: ToolRound, calls: ModelCall) -> None:
        self._host = host
        self._run = run
        self._state = state
        self._rounds = rounds
        self._calls = calls

    async def end(self, step: EndRun) -> CallModel | None:
        """The terminal commit; a COMPLETED end with a steering message undelivered is one more model call."""
        if step.outcome is RunOutcome.COMPLETED:
            if not self._host.ledger.record.pending_injections:
                step = await self._close_call_ahead(step)
                try:
                    await self.finish(step)
                    return None
                except CommitRefused:
                    pass  # a steering message was committed just before the end: it is delivered next
            ledger = self._host.ledger
            events = list(step.lead_events)
            if not step.call_closed:
                events.append(
                    ledger.stamp(self._run.run_id, TurnComplete(stop_reason=step.stop_reason or StopReason.STOP))
                )
            await ledger.commit(events=events, transcript=step.transcript, history=step.history, **step.changes)
            return CallModel()
        await self.finish(step)
        return None

    async def _close_call_ahead(self, step: EndRun) -> EndRun:
        """The model call's usage_snapshot and turn_complete go out before the terminal commit (only run_finished
        waits for it, docs/protocol.md): the host reads them while the commit runs."""
        ledger = self._host.ledger
        closed = ledger.stamp(self._run.run_id, TurnComplete(stop_reason=step.stop_reason or StopReason.STOP))
        if not await ledger.send_ahead([*step.lead_events, closed]):
            return replace(step, lead_events=[*step.lead_events, closed], call_closed=True)
        return replace(step, lead_events=[], call_closed=True)

    async def fail(self, failed: Failed) -> None:
        await self._run.admitted.wait()
        await self._rounds.land()
        await self._rounds.close(failed.detail.message, ResolvedBy.STOP)
        await self.finish(
            EndRun(
                outcome=RunOutcome.FAILED,
                reason=failed.reason,
                stop_reason=failed.stop_reason,
                error=failed.detail,
                turn_error=failed.detail if failed.stop_reason is StopReason.ERROR else None,
            )
        )

    async def fail_internally(self, exc: Exception) -> None:
        logger.exception("run %s failed internally", self._run.run_id, extra={"category": "system"})
        await self._run.admitted.wait()
        try:
            await self._rounds.land()
        except Exception:  # its failure is the one being handled, or it is logged by the commit
            logger.debug("the landing results commit failed too", exc_info=True)
        detail = store_failure(exc)
        try:
            await self._rounds.close("cancelled: internal error", ResolvedBy.STOP)
        except Exception:
            logger.exception("could not close the tool round of run %s", self._run.run_id)
        await self.finish(
            EndRun(outcome=RunOutcome.FAILED, reason=RunReason.INTERNAL, stop_reason=StopReason.ERROR, error=detail)
        )

    async def _failed_end(self, previous: RunRecord, exc: Exception) -> EndRun:
        """The terminal commit failed (a full disk, a locked database): nothing of it was stored, so watchers
        are told the run FAILED with the store's error rather than the end that was not written. A smaller
        commit of just that end is tried (it may fit where the whole did not); if it fails too, the session is
        idle in memory and start-up recovery marks the run INTERRUPTED should the process die first."""
        run, ledger = self._run, self._host.ledger
        detail = store_failure(exc)
        step = EndRun(outcome=RunOutcome.FAILED, reason=RunReason.INTERNAL, stop_reason=StopReason.ERROR, error=detail)
        finished = ledger.stamp(
            run.run_id,
            RunFinished(outcome=step.outcome, reason=step.reason, stop_reason=step.stop_reason, error=detail),
        )
        run.record = previous.finished(step.outcome, step.reason, sequence=finished.sequence, at=finished.create_time)
        try:
            await ledger.commit(
                events=[finished],
                runs=[run.record],
                state=SessionState.IDLE,
                active_run_id="",
                pending_call_ids=(),
                pending_injections=(),
            )
        except Exception:
            logger.warning("could not commit the failed end of run %s either", run.run_id, extra={"category": "system"})
            ledger.force_idle([finished])
        return step

    async def stopped(self) -> None:
        """The run's task was cancelled: an aborted model call or the round closed, then STOPPED (FAILED for
        the end of the shutdown grace, which is a failure of the server, not a choice of the host)."""
        run, state, ledger = self._run, self._state, self._host.ledger
        reason = run.stop_reason or RunReason.CANCELLED
        lead: list[SequencedEvent] = []
        transcript: list[TranscriptEntry] = []
        await ledger.flush_deltas()  # what streamed before the stop still reaches watchers, in order
        if state.in_model_call:
            lead.append(ledger.stamp(run.run_id, TurnComplete(stop_reason=StopReason.ABORTED)))
            transcript.extend(self._calls.aborted_partial(lead[0].sequence))
        else:
            message, resolved_by = stop_message(reason)
            await self._rounds.close(message, resolved_by)
        interrupted = reason is RunReason.INTERRUPTED
        await self.finish(
            EndRun(
                outcome=RunOutcome.FAILED if interrupted else RunOutcome.STOPPED,
                reason=reason,
                error=ErrorDetail(
                    code=ErrorCode.UNAVAILABLE, reason="INTERRUPTED", message="the server shut down during the run"
                )
                if interrupted
                else None,
                stop_reason=StopReason.ABORTED if state.in_model_call else state.last_stop_reason,
                lead_events=lead,
                transcript=transcript,
            )
        )

    async def finish(self, step: EndRun) -> None:
        """The terminal commit, then the end hooks. Raises CommitRefused (nothing written) when a COMPLETED
        end finds a steering message committed just before it."""
        run, state, ledger = self._run, self._state, self._host.ledger
        await ledger.flush_deltas()
        events = list(step.lead_events)
        closes_model_call = step.outcome is RunOutcome.COMPLETED or step.reason in _CLOSE_MODEL_CALL
        model_call_closed = step.call_closed or any(isinstance(e.body, TurnComplete) for e in events)
        if step.stop_reason is not None and closes_model_call and not model_call_closed:
            events.append(ledger.stamp(run.run_id, TurnComplete(stop_reason=step.stop_reason, error=step.turn_error)))
        finished = ledger.stamp(
            run.run_id,
            RunFinished(
                outcome=step.outcome,
                reason=step.reason,
                stop_reason=step.stop_reason,
                error=step.error,
                usage=state.usage,
            ),
        )
        events.append(finished)
        record = replace(
            run.record.finished(step.outcome, step.reason, sequence=finished.sequence, at=finished.create_time),
            usage=state.usage,
        )

        def end_queue(session: SessionRecord) -> dict[str, object]:
            # A run completes only with its steering queue empty (decided in commit order, so a message
            # injected just before is not lost); a run that stops or fails drops what it did not deliver.
            if step.outcome is RunOutcome.COMPLETED and session.pending_injections:
                raise CommitRefused
            return {"pending_injections": ()}

        previous, run.record = run.record, record
        try:
            await ledger.commit(
                events=events,
                transcript=step.transcript,
                history=step.history,
                runs=[record],
                state=SessionState.IDLE,
                active_run_id="",
                pending_call_ids=(),
                derive=end_queue,
                **step.changes,
            )
        except CommitRefused:
            run.record = previous
            raise
        except Exception as exc:
            logger.exception("could not commit the end of run %s", run.run_id, extra={"category": "system"})
            step = await self._failed_end(previous, exc)
        fire_end_hooks(
            self._host.hooks,
            run,
            ledger.history,
            outcome=step.outcome,
            stop_reason=step.stop_reason,
            error=step.error,
            last_call_usage=state.last_call_usage,
            duration_ms=int((utcnow() - run.record.started_at).total_seconds() * 1000),
        )


def store_failure(exc: Exception) -> ErrorDetail:
    """A store that cannot write for now (disk full, locked) says so; anything else is an internal error."""
    if isinstance(exc, StoreUnavailableError):
        return exc.detail()
    return ErrorDetail(code=ErrorCode.INTERNAL, reason="INTERNAL", message=f"internal error: {type(exc).__name__}")
