"""The agent loop of one run: each step returns the next (docs/architecture.md, "The path of one turn").

    CallModel ──► RunToolRound ──► CallModel … ──► EndRun
         │              └────────► Suspend (hosted calls pending: the task ends, the run does not)
         └────────────────────────► Failed (limits, refusals, truncation, fail-closed hooks)

Commit points: the run is admitted by the live session; each model call's assistant message with its tool
calls; each tool result; the suspension; the round's results message; the run end. Cancellation (stop,
cancel, disconnect, interrupt, reset, delete, shutdown) arrives as CancelledError and is finished here: partial
text goes to the transcript marked aborted, never to the model history, and unfinished tool calls get an
is_error result so the history never holds a tool_use without its tool_result."""

from __future__ import annotations

import asyncio

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import CompactionReason, RunOutcome, RunReason, StopReason
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import RunStatus
from general_agent_server.runs.compaction import DEFAULT_COOLDOWN, CompactionOutcome, Compactor, compaction_due
from general_agent_server.runs.endings import Endings
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.limits import deadline_exceeded, limit_reached, run_limits
from general_agent_server.runs.model_call import ModelCall
from general_agent_server.runs.run_hooks import prepare_prompt
from general_agent_server.runs.state import (
    ActiveRun,
    CallModel,
    Compact,
    DriverState,
    EndRun,
    Failed,
    NextStep,
    RunFailed,
    RunToolRound,
    Suspend,
    stop_message,
)
from general_agent_server.runs.tool_round import ToolRound
from general_agent_server.sessions import session_log


class RunDriver:
    """Executes one run, or its continuation after a suspension (`resume_round`: the round's hosted results
    are all in, so its results message commits first)."""

    def __init__(
        self,
        host: RunHost,
        run: ActiveRun,
        *,
        first_history: list[HistoryMessage] | None = None,
        resume_round: bool = False,
    ) -> None:
        self._host = host
        self._run = run
        self._resume_round = resume_round
        self._state = DriverState(
            usage=run.record.usage,
            first_history=first_history,
            last_stop_reason=StopReason.TOOL_USE if resume_round else None,
        )
        self._limits = run_limits(host.ledger.record.config.limits, host.settings)
        self._rounds = ToolRound(host, run, self._state, self._limits)
        self._calls = ModelCall(host, run, self._state, self._limits, self._rounds)
        self._endings = Endings(host, run, self._state, self._rounds, self._calls)

    async def execute(self) -> None:
        host, run = self._host, self._run
        session_log.bind_run(host.tenant, host.session_id, run.run_id)
        try:
            if self._resume_round:
                await self._rounds.resume(host.toolset())
            await self._loop()
        except asyncio.CancelledError:
            if run.admission_failed:
                return  # the run never existed: nothing to finish
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await run.admitted.wait()
            await self._rounds.land()
            # Background processes this run started die with it (exec background).
            await host.run_cancelled(run.run_id)
            if run.record.status is RunStatus.FINISHED:
                return  # the stop came while the terminal commit landed: the run has its one run_finished
            await self._endings.stopped()
        except Exception as exc:
            await self._endings.fail_internally(exc)
        finally:
            for task in self._state.tasks.values():
                task.cancel()
            host.run_task_done(run, suspended=self._state.suspended)

    async def close_suspended(self, reason: RunReason) -> None:
        """Stops a suspended run: its pending hosted calls resolve as errors, then the run ends STOPPED."""
        message, resolved_by = stop_message(reason)
        await self._rounds.close(message, resolved_by)
        await self._endings.finish(EndRun(outcome=RunOutcome.STOPPED, reason=reason, stop_reason=StopReason.TOOL_USE))
        self._host.run_task_done(self._run, suspended=False)

    async def _loop(self) -> None:
        step: NextStep = CallModel()
        while True:
            if isinstance(step, CallModel | RunToolRound):
                try:
                    step = await self._advance(step)
                except RunFailed as failure:
                    step = failure.failed
            elif isinstance(step, Compact):
                step = await self._compact_for_overflow()
            elif isinstance(step, Failed):
                await self._endings.fail(step)
                return
            elif isinstance(step, Suspend):
                await self._rounds.suspend(step.hosted)
                return
            else:
                follow = await self._endings.end(step)
                if follow is None:
                    return
                step = follow

    async def _advance(self, step: CallModel | RunToolRound) -> NextStep:
        if isinstance(step, RunToolRound):
            return await self._rounds.run(step, self._host.toolset())
        return await self._model_step()

    async def _model_step(self) -> NextStep:
        host, run, state = self._host, self._run, self._state
        refused = self._check_limits()
        if refused is not None:
            return refused
        if run.credential is None:
            run.credential = host.credential()
            if run.credential is None:
                return Failed(
                    reason=RunReason.NO_API_KEY,
                    detail=ErrorDetail(
                        code=ErrorCode.FAILED_PRECONDITION,
                        reason="NO_API_KEY",
                        message="no API key resolves for this session to continue the run",
                    ),
                    stop_reason=state.last_stop_reason,
                )
        if state.first_history is None and host.ledger.record.pending_injections:
            await self._rounds.land()  # injections are committed after the round's results
            await self._calls.deliver_injections()
        if self._compaction_due():
            await self._compact(CompactionReason.TOKEN_THRESHOLD)
        await host.prepare_tools()
        tools = host.toolset()
        history = (
            state.first_history or (state.next_history if state.landing is not None else None) or host.ledger.history
        )
        state.first_history = state.next_history = None
        if run.prompt is None:
            # First model call of the run, or a continuation in a new process: ask the hooks.
            run.prompt = await prepare_prompt(
                host.hooks,
                run,
                history,
                base_prompt=host.ledger.record.config.system_prompt,
                budget=self._limits.remaining_seconds(run.record.started_at),
                stop_reason=state.last_stop_reason,
            )
        outcome = await self._calls.call(self._calls.request(history, run.prompt, tools), run.credential)
        if isinstance(outcome, EndRun | Compact):
            return outcome
        return await self._calls.next_step(outcome, run.prompt.model_ref)

    def _compaction_due(self) -> bool:
        """The session's automatic compaction: its threshold crossed by the latest snapshot, its cooldown past."""
        automatic = self._host.ledger.record.config.auto_compaction
        if automatic.threshold_pct <= 0:
            return False
        cooldown = DEFAULT_COOLDOWN if automatic.cooldown_seconds is None else automatic.cooldown_seconds
        return compaction_due(automatic.threshold_pct, cooldown)(self._host.ledger.record)

    async def _compact(self, reason: CompactionReason) -> CompactionOutcome:
        """Compacts inside the run (its events on the run's stream); the next request is built from the new
        history, and the summary's usage counts as the run's."""
        run, state = self._run, self._state
        await run.admitted.wait()
        await self._rounds.land()
        model_ref = run.prompt.model_ref if run.prompt is not None else run.model_ref
        assert run.credential is not None  # resolved before every model call
        compactor = Compactor(self._host, run_id=run.run_id, model_ref=model_ref, credential=run.credential)
        outcome = await compactor.compact(reason)
        state.usage = state.usage + outcome.usage
        state.first_history = state.next_history = None
        return outcome

    async def _compact_for_overflow(self) -> NextStep:
        outcome = await self._compact(CompactionReason.CONTEXT_OVERFLOW)
        if outcome.compacted:
            return CallModel()
        message = outcome.error.message if outcome.error is not None else "nothing older than the kept turns"
        return Failed(
            reason=RunReason.CONTEXT_OVERFLOW,
            detail=ErrorDetail(
                code=ErrorCode.INVALID_ARGUMENT,
                reason="CONTEXT_OVERFLOW",
                message=f"{self._state.overflow_message} (compaction could not shrink the history: {message})",
            ),
            stop_reason=StopReason.ERROR,
        )

    def _check_limits(self) -> Failed | None:
        state, limits = self._state, self._limits
        if state.usage.model_calls >= limits.model_calls:
            return limit_reached(
                RunReason.MAX_MODEL_CALLS, "max_model_calls_per_run", limits.model_calls, state.last_stop_reason
            )
        if (utcnow() - self._run.record.started_at).total_seconds() > limits.deadline_seconds:
            return deadline_exceeded(limits.deadline_seconds, state.last_stop_reason)
        return None
