"""The agent loop of one run: model call → events → (tool round → next model call)* → run_finished.

Commit points (spec 8.1): the run is admitted by the actor; each model call's assistant message, usage
and turn_complete are one commit; the run end is committed with the last step. Cancellation (stop,
cancel, disconnect, reset, delete) arrives as CancelledError and is finished here: the partial text goes
to the transcript marked aborted, never to the model history."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from general_agent_server.core.clock import utcnow
from general_agent_server.core.errors import ErrorCode, ErrorDetail
from general_agent_server.core.events import (
    AssistantDelta,
    ReasoningDelta,
    ReasoningEnd,
    RunFinished,
    RunOutcome,
    RunReason,
    SequencedEvent,
    StopReason,
    ToolCall,
    ToolError,
    TurnComplete,
    UsageSnapshotEvent,
)
from general_agent_server.core.history import HistoryMessage
from general_agent_server.core.model import (
    MessageComplete,
    ModelCallError,
    TextDelta,
    ThinkingBlockEnd,
    ThinkingDelta,
)
from general_agent_server.core.model_catalog import capabilities
from general_agent_server.core.request_builder import build_request
from general_agent_server.core.runs import RunStatus
from general_agent_server.core.session import SessionState, Usage, UsageSnapshot
from general_agent_server.core.transcript import (
    AssistantEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)

if TYPE_CHECKING:
    from general_agent_server.core.actor import ActiveRun, SessionActor

logger = logging.getLogger(__name__)

_STOP_REASONS = {
    "end_turn": StopReason.STOP,
    "stop_sequence": StopReason.STOP,
    "pause_turn": StopReason.STOP,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "tool_use": StopReason.TOOL_USE,
}


def provider_error_detail(error: ModelCallError) -> ErrorDetail:
    """Spec Appendix B: the provider's HTTP status decides the canonical code."""
    status = error.http_status
    if error.timeout:
        code = ErrorCode.DEADLINE_EXCEEDED
    elif status is None or status >= 500 or status == 529:
        code = ErrorCode.UNAVAILABLE
    elif status in (401, 403):
        code = ErrorCode.PERMISSION_DENIED
    elif status == 429:
        code = ErrorCode.RESOURCE_EXHAUSTED
    elif status == 404:
        code = ErrorCode.NOT_FOUND
    else:
        code = ErrorCode.INVALID_ARGUMENT
    metadata = {"provider_request_id": error.provider_request_id}
    if status is not None:
        metadata["http_status"] = str(status)
    return ErrorDetail(code=code, reason="PROVIDER_ERROR", message=error.message, metadata=metadata)


class RunDriver:
    """Executes one run on behalf of its actor."""

    def __init__(
        self, actor: SessionActor, run: ActiveRun, *, first_history: list[HistoryMessage] | None = None
    ) -> None:
        self.actor = actor
        self.run = run
        self._first_history = first_history
        self.usage = Usage()
        self._partial_text: list[str] = []
        self._in_model_call = False
        self._last_stop_reason: StopReason | None = None

    async def execute(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            if self.run.admission_failed:
                return  # the run never existed: nothing to finish
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self.run.admitted.wait()
            await self._finish_stopped()
        except Exception as exc:
            logger.exception("run %s failed internally", self.run.run_id, extra={"category": "system"})
            await self.run.admitted.wait()
            await self._finish(
                RunOutcome.FAILED,
                reason=RunReason.INTERNAL,
                stop_reason=StopReason.ERROR,
                error=ErrorDetail(
                    code=ErrorCode.INTERNAL,
                    reason="INTERNAL",
                    message=f"internal error: {type(exc).__name__}",
                ),
            )
        finally:
            self.actor.run_ended(self.run)

    # ------------------------------------------------------------------ the loop
    async def _loop(self) -> None:
        actor, run = self.actor, self.run
        model_ref = run.model_ref
        while True:
            config = actor.record.config
            history, self._first_history = self._first_history or actor.history, None
            request = build_request(
                config=config,
                model_ref=model_ref,
                system_prompt=config.system_prompt,
                history=history,
                tools=[],
                max_tokens_cap=actor.settings.max_tokens_cap,
            )
            self._partial_text = []
            self._in_model_call = True
            complete: MessageComplete | None = None
            try:
                async for item in actor.model.stream(request, run.credential):
                    if not run.admitted.is_set():
                        await run.admitted.wait()
                    if isinstance(item, TextDelta):
                        self._partial_text.append(item.text)
                        await actor.emit_buffered(run.run_id, AssistantDelta(text=item.text))
                    elif isinstance(item, ThinkingDelta):
                        await actor.emit_buffered(run.run_id, ReasoningDelta(text=item.text))
                    elif isinstance(item, ThinkingBlockEnd):
                        await actor.emit_buffered(run.run_id, ReasoningEnd())
                    else:
                        complete = item
            except ModelCallError as error:
                await run.admitted.wait()
                self._in_model_call = False
                self.usage = self.usage + error.partial_usage
                detail = provider_error_detail(error)
                await self._finish(
                    RunOutcome.FAILED,
                    reason=RunReason.PROVIDER_ERROR,
                    stop_reason=StopReason.ERROR,
                    error=detail,
                    turn_error=detail,
                )
                return
            self._in_model_call = False
            if complete is None:
                raise RuntimeError("model stream ended without a message")
            if not await self._after_model_call(complete, model_ref):
                return

    async def _after_model_call(self, complete: MessageComplete, model_ref: str) -> bool:
        """Commits the assistant message; returns True when the loop makes another model call."""
        actor, run = self.actor, self.run
        self.usage = self.usage + complete.usage
        stop_reason = _STOP_REASONS.get(complete.stop_reason or "", StopReason.ERROR)
        if complete.stop_reason == "refusal":
            stop_reason = StopReason.ERROR
        self._last_stop_reason = stop_reason
        snapshot = self._snapshot(complete.usage, model_ref)
        text = "\n".join(b["text"] for b in complete.content if b.get("type") == "text" and b.get("text"))
        assistant = HistoryMessage(
            role="assistant", content=tuple(complete.content), run_id=run.run_id, model_ref=model_ref
        )
        tool_uses = [b for b in complete.content if b.get("type") == "tool_use"]
        events: list[SequencedEvent] = [actor.stamp(run.run_id, UsageSnapshotEvent(snapshot=snapshot))]
        transcript: list[TranscriptEntry] = []
        if text:
            transcript.append(actor.transcript_entry(run.run_id, AssistantEntry(text=text), events[0].sequence))
        changes: dict[str, Any] = {
            "usage_snapshot": snapshot,
            "cumulative_usage": actor.record.cumulative_usage + complete.usage,
        }

        if tool_uses and complete.stop_reason == "max_tokens":
            # The call was cut mid-arguments: never execute it, and keep it out of the history.
            detail = ErrorDetail(
                code=ErrorCode.OUT_OF_RANGE,
                reason="OUTPUT_TRUNCATED",
                message="the model hit max_tokens inside a tool call; the call was not executed",
            )
            await self._finish(
                RunOutcome.FAILED,
                reason=RunReason.OUTPUT_TRUNCATED,
                stop_reason=StopReason.LENGTH,
                error=detail,
                lead_events=events,
                transcript=transcript,
                **changes,
            )
            return False
        if tool_uses and complete.stop_reason == "tool_use":
            # No tool runtime yet: every call is an unknown tool, answered with is_error so the model can go on.
            results: list[dict[str, Any]] = []
            for block in tool_uses:
                call_id, name = str(block["id"]), str(block["name"])
                input_json = json.dumps(block.get("input") or {}, separators=(",", ":"))
                message = f"Tool {name} not found"
                call = actor.stamp(run.run_id, ToolCall(call_id=call_id, tool_name=name, input_json=input_json))
                error = actor.stamp(run.run_id, ToolError(call_id=call_id, tool_name=name, error=message))
                events += [call, error]
                transcript += [
                    actor.transcript_entry(
                        run.run_id,
                        ToolCallEntry(call_id=call_id, tool_name=name, input_json=input_json),
                        call.sequence,
                    ),
                    actor.transcript_entry(
                        run.run_id,
                        ToolResultEntry(call_id=call_id, tool_name=name, output=(), is_error=True),
                        error.sequence,
                    ),
                ]
                results.append({"type": "tool_result", "tool_use_id": call_id, "content": message, "is_error": True})
            events.append(actor.stamp(run.run_id, TurnComplete(stop_reason=StopReason.TOOL_USE)))
            tool_message = HistoryMessage(role="user", content=tuple(results), run_id=run.run_id)
            await actor.commit(events=events, transcript=transcript, history=[assistant, tool_message], **changes)
            return True
        if complete.stop_reason == "refusal":
            detail = ErrorDetail(
                code=ErrorCode.FAILED_PRECONDITION,
                reason="MODEL_REFUSAL",
                message="the model refused to continue",
            )
            await self._finish(
                RunOutcome.FAILED,
                reason=RunReason.MODEL_REFUSAL,
                stop_reason=StopReason.ERROR,
                error=detail,
                turn_error=detail,
                lead_events=events,
                transcript=transcript,
                history=[assistant],
                **changes,
            )
            return False
        await self._finish(
            RunOutcome.COMPLETED,
            stop_reason=stop_reason,
            lead_events=events,
            transcript=transcript,
            history=[assistant],
            **changes,
        )
        return False

    def _snapshot(self, usage: Usage, model_ref: str) -> UsageSnapshot:
        window = capabilities(model_ref).context_window
        used = usage.context_input_tokens
        return UsageSnapshot(
            used_input_tokens=used,
            context_window=window,
            used_pct=round(min(100.0, used * 100.0 / window), 2) if window else 0.0,
            capture_time=utcnow(),
        )

    # ------------------------------------------------------------------ endings
    async def _finish_stopped(self) -> None:
        actor, run = self.actor, self.run
        reason = run.stop_reason or RunReason.CANCELLED
        transcript: list[TranscriptEntry] = []
        lead: list[SequencedEvent] = []
        if self._in_model_call:
            lead.append(actor.stamp(run.run_id, TurnComplete(stop_reason=StopReason.ABORTED)))
            partial = "".join(self._partial_text)
            if partial:
                transcript.append(
                    actor.transcript_entry(run.run_id, AssistantEntry(text=partial, aborted=True), lead[0].sequence)
                )
        # The end of the shutdown grace is a failure of the server, not a choice of the host.
        outcome = RunOutcome.FAILED if reason is RunReason.INTERRUPTED else RunOutcome.STOPPED
        error = (
            ErrorDetail(
                code=ErrorCode.UNAVAILABLE,
                reason="INTERRUPTED",
                message="the server shut down during the run",
            )
            if reason is RunReason.INTERRUPTED
            else None
        )
        await self._finish(
            outcome,
            reason=reason,
            error=error,
            stop_reason=StopReason.ABORTED if self._in_model_call else self._last_stop_reason,
            lead_events=lead,
            transcript=transcript,
        )

    async def _finish(
        self,
        outcome: RunOutcome,
        *,
        reason: RunReason | None = None,
        stop_reason: StopReason | None,
        error: ErrorDetail | None = None,
        turn_error: ErrorDetail | None = None,
        lead_events: list[SequencedEvent] | None = None,
        transcript: list[TranscriptEntry] | None = None,
        history: list[HistoryMessage] | None = None,
        **changes: Any,
    ) -> None:
        """The terminal commit: lead events (+ turn_complete), run_finished, run row, session IDLE."""
        actor, run = self.actor, self.run
        events = list(lead_events or [])
        if stop_reason is not None and self.run.stop_reason is None:
            events.append(actor.stamp(run.run_id, TurnComplete(stop_reason=stop_reason, error=turn_error)))
        finished = actor.stamp(
            run.run_id,
            RunFinished(outcome=outcome, reason=reason, stop_reason=stop_reason, error=error, usage=self.usage),
        )
        events.append(finished)
        record = replace(
            run.record,
            status=RunStatus.FINISHED,
            outcome=outcome,
            reason=reason,
            last_sequence=finished.sequence,
            finished_at=finished.create_time,
            usage=self.usage,
        )
        run.record = record
        try:
            await actor.commit(
                events=events,
                transcript=transcript,
                history=history,
                runs=[record],
                state=SessionState.IDLE,
                active_run_id="",
                **changes,
            )
        except Exception:
            # The store failed at the very end: never leave the session wedged in memory. Start-up recovery
            # marks the run INTERRUPTED if the process dies before a later commit.
            logger.exception("could not commit the end of run %s", run.run_id, extra={"category": "system"})
            actor.record = replace(actor.record, state=SessionState.IDLE, active_run_id="")
            actor.publish(events)
