"""One model call of a run and what its answer makes the run do next.

The call's deltas are emitted as they stream. A stream that breaks after the response started is retried under
the retry budget: the abandoned attempt's partial text is reported with turn_complete{error} and goes to the
transcript marked aborted, never to the model history. When the budget is spent the run ends
FAILED/PROVIDER_ERROR. The assistant message commits with the call's usage snapshot; then the run finishes,
runs a tool round, or (a steering message undelivered) makes one more call."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import (
    AssistantDelta,
    MessageInjected,
    ReasoningDelta,
    ReasoningEnd,
    RunOutcome,
    RunReason,
    SequencedEvent,
    StopReason,
    TurnComplete,
    UsageSnapshotEvent,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import Usage, UsageSnapshot
from general_agent_server.domain.transcript import AssistantEntry, TranscriptEntry
from general_agent_server.model.catalog import capabilities
from general_agent_server.model.port import (
    Credential,
    MessageComplete,
    ModelCallError,
    ModelRequest,
    TextDelta,
    ThinkingBlockEnd,
    ThinkingDelta,
)
from general_agent_server.model.request_builder import build_request, user_content_blocks
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.limits import RunLimits
from general_agent_server.runs.state import ActiveRun, Compact, DriverState, EndRun, NextStep, PromptPlan, RunToolRound
from general_agent_server.runs.tool_round import ToolRound
from general_agent_server.tools.runtime import ToolSet

_STOP_REASONS = {
    "end_turn": StopReason.STOP,
    "stop_sequence": StopReason.STOP,
    "pause_turn": StopReason.STOP,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "tool_use": StopReason.TOOL_USE,
}


def provider_error_detail(error: ModelCallError) -> ErrorDetail:
    """The provider's HTTP status decides the canonical code (docs/protocol.md, run outcomes)."""
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
    if error.error_type:
        metadata["error_type"] = error.error_type
    return ErrorDetail(code=code, reason="PROVIDER_ERROR", message=error.message, metadata=metadata)


# How the Messages API words a request over the model's context window (HTTP 400, invalid_request_error).
_OVERFLOW = re.compile(
    r"prompt is too long|context (window|length)|too many (input )?tokens|exceeds? the maximum", re.I
)


def is_context_overflow(error: ModelCallError) -> bool:
    return error.http_status == 400 and bool(_OVERFLOW.search(error.message))


def usage_snapshot(usage: Usage, model_ref: str, context_windows: Sequence[tuple[str, int]] = ()) -> UsageSnapshot:
    """What the call's input filled of the model's window: uncached input plus cache reads and writes."""
    window = capabilities(model_ref, context_windows).context_window
    used = usage.context_input_tokens
    return UsageSnapshot(
        used_input_tokens=used,
        context_window=window,
        used_pct=round(min(100.0, used * 100.0 / window), 2) if window else 0.0,
        capture_time=utcnow(),
    )


class ModelCall:
    """The model calls of one driver."""

    def __init__(self, host: RunHost, run: ActiveRun, state: DriverState, limits: RunLimits, rounds: ToolRound) -> None:
        self._host = host
        self._run = run
        self._state = state
        self._limits = limits
        self._rounds = rounds

    def request(self, history: list[HistoryMessage], plan: PromptPlan, tools: ToolSet) -> ModelRequest:
        config = self._host.ledger.record.config
        return build_request(
            config=config,
            model_ref=plan.model_ref,
            system_prompt=config.system_prompt if plan.system_prompt is None else plan.system_prompt,
            history=history,
            tools=tools.definitions(),
            max_tokens_cap=self._host.settings.max_tokens_cap,
            prepend_context=plan.prepend_context,
            run_id=self._run.run_id,
            encoding=self._host.history_encoding,
        )

    async def call(self, request: ModelRequest, credential: Credential) -> MessageComplete | Compact | EndRun:
        """One model call with its retries; an EndRun when the provider failed for good."""
        host, run, state = self._host, self._run, self._state
        ledger, settings = host.ledger, host.settings
        attempt = 0
        while True:
            try:
                return await self._stream_once(request, credential)
            except ModelCallError as error:
                await run.admitted.wait()
                await self._rounds.land()
                await ledger.flush_deltas()
                state.in_model_call = False
                state.usage = state.usage + error.partial_usage
                detail = provider_error_detail(error)
                # The failed call's turn_complete{error}; its partial text goes to the transcript only.
                closed = ledger.stamp(run.run_id, TurnComplete(stop_reason=StopReason.ERROR, error=detail))
                transcript = self.aborted_partial(closed.sequence)
                if is_context_overflow(error):
                    return await self._overflowed(detail, closed, transcript)
                if not error.retryable or attempt >= settings.model_max_retries:
                    return EndRun(
                        outcome=RunOutcome.FAILED,
                        reason=RunReason.PROVIDER_ERROR,
                        stop_reason=StopReason.ERROR,
                        error=detail,
                        lead_events=[closed],
                        transcript=transcript,
                    )
                attempt += 1
                await ledger.commit(events=[closed], transcript=transcript)
                await asyncio.sleep(min(8.0, settings.model_retry_backoff * 2 ** (attempt - 1)))

    async def _overflowed(
        self, detail: ErrorDetail, closed: SequencedEvent, transcript: list[TranscriptEntry]
    ) -> Compact | EndRun:
        """Over the context window: compact once and call again; a second overflow fails the run."""
        state = self._state
        if not state.overflow_compacted:
            state.overflow_compacted = True
            state.overflow_message = detail.message
            await self._host.ledger.commit(events=[closed], transcript=transcript)
            return Compact()
        return EndRun(
            outcome=RunOutcome.FAILED,
            reason=RunReason.CONTEXT_OVERFLOW,
            stop_reason=StopReason.ERROR,
            error=replace(detail, reason="CONTEXT_OVERFLOW"),
            lead_events=[closed],
            transcript=transcript,
        )

    def aborted_partial(self, sequence: int) -> list[TranscriptEntry]:
        """The text a failed or aborted model call streamed, for the transcript only."""
        partial = "".join(self._state.partial_text)
        if not partial:
            return []
        return [self._host.ledger.entry(self._run.run_id, AssistantEntry(text=partial, aborted=True), sequence)]

    async def _stream_once(self, request: ModelRequest, credential: Credential) -> MessageComplete:
        host, run, state = self._host, self._run, self._state
        ledger = host.ledger
        state.partial_text = []
        state.in_model_call = True
        complete: MessageComplete | None = None
        async for item in host.model.stream(request, credential):
            if not run.admitted.is_set():
                await run.admitted.wait()
            if state.landing is not None:
                await self._rounds.land()
            if isinstance(item, TextDelta):
                state.partial_text.append(item.text)
                await ledger.emit_delta(run.run_id, AssistantDelta(text=item.text), first=item.first)
            elif isinstance(item, ThinkingDelta):
                await ledger.emit_delta(run.run_id, ReasoningDelta(text=item.text), first=item.first)
            elif isinstance(item, ThinkingBlockEnd):
                await ledger.emit_buffered(run.run_id, ReasoningEnd())
            else:
                complete = item
        await self._rounds.land()
        await ledger.flush_deltas()
        state.in_model_call = False
        if complete is None:
            raise RuntimeError("model stream ended without a message")
        return complete

    async def deliver_injections(self) -> None:
        """Steering messages go to the model at its next call, after that call's tool results."""
        ledger, run = self._host.ledger, self._run
        pending = ledger.record.pending_injections
        if not pending:
            return
        blocks = tuple(block for parts in pending for block in user_content_blocks(parts))
        events = [ledger.stamp(run.run_id, MessageInjected(input=parts)) for parts in pending]
        await ledger.commit(
            events=events,
            history=[HistoryMessage(role="user", content=blocks, run_id=run.run_id)],
            # Only what was delivered leaves the queue: a message injected meanwhile waits for the next call.
            derive=lambda record: {"pending_injections": record.pending_injections[len(pending) :]},
        )

    async def next_step(self, complete: MessageComplete, model_ref: str) -> NextStep:
        """What the model's answer makes the run do next (the assistant message commits with that step)."""
        host, run, state = self._host, self._run, self._state
        ledger = host.ledger
        state.usage = state.usage + complete.usage
        state.last_call_usage = complete.usage
        stop_reason = _STOP_REASONS.get(complete.stop_reason or "", StopReason.ERROR)
        state.last_stop_reason = stop_reason
        snapshot = usage_snapshot(complete.usage, model_ref, host.settings.context_windows)
        text = "\n".join(b["text"] for b in complete.content if b.get("type") == "text" and b.get("text"))
        assistant = HistoryMessage(
            role="assistant", content=tuple(complete.content), run_id=run.run_id, model_ref=model_ref
        )
        tool_uses = [b for b in complete.content if b.get("type") == "tool_use"]
        events: list[SequencedEvent] = [ledger.stamp(run.run_id, UsageSnapshotEvent(snapshot=snapshot))]
        transcript: list[TranscriptEntry] = []
        if text:
            transcript.append(ledger.entry(run.run_id, AssistantEntry(text=text), events[0].sequence))
        changes: dict[str, Any] = {
            "usage_snapshot": snapshot,
            "cumulative_usage": ledger.record.cumulative_usage + complete.usage,
        }
        if tool_uses and complete.stop_reason == "max_tokens":
            # The call was cut mid-arguments: never execute it, and keep it out of the history.
            detail = ErrorDetail(
                code=ErrorCode.OUT_OF_RANGE,
                reason="OUTPUT_TRUNCATED",
                message="the model hit max_tokens inside a tool call; the call was not executed",
            )
            return EndRun(
                outcome=RunOutcome.FAILED,
                reason=RunReason.OUTPUT_TRUNCATED,
                stop_reason=StopReason.LENGTH,
                error=detail,
                lead_events=events,
                transcript=transcript,
                changes=changes,
            )
        if tool_uses:
            # Hook order (docs/hooks.md): the assistant preamble is written before the round's before_tool_call hooks.
            transcript = await host.hooks.filter_transcript(transcript)
            return RunToolRound(
                tool_uses=tuple(tool_uses), assistant=assistant, events=events, transcript=transcript, changes=changes
            )
        if complete.stop_reason == "refusal":
            detail = ErrorDetail(
                code=ErrorCode.FAILED_PRECONDITION, reason="MODEL_REFUSAL", message="the model refused to continue"
            )
            return EndRun(
                outcome=RunOutcome.FAILED,
                reason=RunReason.MODEL_REFUSAL,
                stop_reason=StopReason.ERROR,
                error=detail,
                turn_error=detail,
                lead_events=events,
                transcript=transcript,
                history=[assistant],
                changes=changes,
            )
        return EndRun(
            outcome=RunOutcome.COMPLETED,
            stop_reason=stop_reason,
            lead_events=events,
            transcript=transcript,
            history=[assistant],
            changes=changes,
        )
