"""The agent loop of one run: model call → events → tool round → next model call … → run_finished.

Commit points (spec 8.1): the run is admitted by the actor; each model call's assistant message with its
tool calls; each tool result; the suspension; the round's results message; the run end. Cancellation
(stop, cancel, disconnect, interrupt, reset, delete, shutdown) arrives as CancelledError and is finished
here: partial text goes to the transcript marked aborted, never to the model history; unfinished tool
calls get an is_error result so the history never holds a tool_use without its tool_result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import (
    AssistantDelta,
    EventBody,
    HostedToolCall,
    MessageInjected,
    ReasoningDelta,
    ReasoningEnd,
    RunFinished,
    RunOutcome,
    RunReason,
    SequencedEvent,
    StopReason,
    ToolCall,
    ToolError,
    ToolResult,
    TurnComplete,
    UsageSnapshotEvent,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import CallKind, CallResult, CallStatus, ResolvedBy, RunStatus, ToolCallRecord
from general_agent_server.domain.session import SessionRecord, SessionState, Usage, UsageSnapshot
from general_agent_server.domain.transcript import AssistantEntry, ToolCallEntry, ToolResultEntry, TranscriptEntry
from general_agent_server.hooks.payloads import MessageHistory, without_images
from general_agent_server.hooks.runner import HookFailedError, apply_model_override, system_prompt_with_context
from general_agent_server.hooks.session_hooks import WRITE_PATH_HOOKS, SessionHooks
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
from general_agent_server.sessions import session_log
from general_agent_server.tools.runtime import ToolContext, ToolKind, ToolSet

if TYPE_CHECKING:
    from general_agent_server.sessions.live import ActiveRun, SessionActor

logger = logging.getLogger(__name__)

# Hooks that make the run wait for its admission commit before the first model call (hook order).
RUN_HOOKS = frozenset({"before_model_resolve", "before_agent_start", "before_prompt_build", "llm_input"}) | (
    WRITE_PATH_HOOKS
)
END_HOOKS = frozenset({"agent_end", "llm_output"})
# The hooks that may change a run's model: asked once, at admission, so run_started names the model used.
MODEL_HOOKS = frozenset({"before_model_resolve", "before_agent_start"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelHookAnswers:
    """What before_model_resolve and the legacy before_agent_start answered for a run (or how they failed:
    a fail-closed failure fails the run HOOK_FAILED once it is admitted)."""

    model_ref: str
    legacy: dict[str, Any] | None = None
    failure: HookFailedError | None = None


def prompt_text(parts: tuple[ContentPart, ...] | list[dict[str, Any]]) -> str:
    """The text of a user message, as the prompt hooks see it."""
    texts = []
    for part in parts:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text", "")))
    return "\n".join(texts)


async def ask_model_hooks(
    hooks: SessionHooks,
    run_id: str,
    prompt: str,
    before: list[HistoryMessage],
    model_ref: str,
    *,
    budget: float,
) -> ModelHookAnswers:
    """before_model_resolve, then the legacy before_agent_start (whose prompt fields apply later, with
    before_prompt_build's); the resolve hook's override wins over the legacy one."""
    try:
        resolve = await hooks.run("before_model_resolve", {"prompt": prompt}, run_id, budget=budget)
        legacy = await hooks.run(
            "before_agent_start",
            {"prompt": prompt, "messages": MessageHistory(tuple(m.api_message() for m in before))},
            run_id,
            budget=budget,
        )
    except HookFailedError as failure:
        return ModelHookAnswers(model_ref=model_ref, failure=failure)
    resolved = resolve.result if resolve is not None else None
    legacy_result = legacy.result if legacy is not None else None
    chosen = (
        resolved if resolved and (resolved.get("modelOverride") or resolved.get("providerOverride")) else legacy_result
    )
    return ModelHookAnswers(model_ref=apply_model_override(model_ref, chosen), legacy=legacy_result)


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
    if error.error_type:
        metadata["error_type"] = error.error_type
    return ErrorDetail(code=code, reason="PROVIDER_ERROR", message=error.message, metadata=metadata)


def tool_result_block(record: ToolCallRecord) -> dict[str, Any]:
    """A round's result as the model sees it: text-only content collapses to a string; images become
    image blocks (with a note when there is no text)."""
    result = record.result or CallResult(content=(TextPart(text="no result"),), is_error=True)
    texts = [p.text for p in result.content if isinstance(p, TextPart)]
    images = [p for p in result.content if isinstance(p, ImagePart)]
    content: Any
    if not images:
        content = "\n".join(texts)
    else:
        content = list(user_content_blocks(result.content))
        if not texts:
            content.insert(0, {"type": "text", "text": "(see attached image)"})
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": record.call_id, "content": content}
    if result.is_error:
        block["is_error"] = True
    return block


def result_event(record: ToolCallRecord, result: CallResult) -> EventBody:
    if result.is_error:
        text = next((p.text for p in result.content if isinstance(p, TextPart) and p.text), "Tool execution failed")
        return ToolError(
            call_id=record.call_id, tool_name=record.tool_name, error=text, details_json=result.details_json
        )
    return ToolResult(
        call_id=record.call_id, tool_name=record.tool_name, output=result.content, details_json=result.details_json
    )


class CommitRefused(Exception):
    """Raised by a commit's `derive` when the state it finds rules the step out; nothing is written."""


class _RunFailed(Exception):
    """Ends the run FAILED with a reason (limits, refusals, truncation)."""

    def __init__(self, reason: RunReason, detail: ErrorDetail, stop_reason: StopReason | None) -> None:
        super().__init__(detail.message)
        self.reason = reason
        self.detail = detail
        self.stop_reason = stop_reason


def _limit_reached(reason: RunReason, setting: str, limit: int, stop_reason: StopReason | None) -> _RunFailed:
    return _RunFailed(
        reason,
        ErrorDetail(
            code=ErrorCode.RESOURCE_EXHAUSTED,
            reason=reason.value,
            message=f"the run reached {setting} ({limit})",
            metadata={"limit": str(limit)},
        ),
        stop_reason,
    )


class RunDriver:
    """Executes one run (or its continuation after a suspension) on behalf of its actor."""

    def __init__(
        self,
        actor: SessionActor,
        run: ActiveRun,
        *,
        first_history: list[HistoryMessage] | None = None,
        resume_round: list[ToolCallRecord] | None = None,
    ) -> None:
        self.actor = actor
        self.run = run
        self._first_history = first_history
        # A tool round's results commit still landing while the next model request goes out (the request
        # only reads `_next_history`); nothing of that call is emitted before it has landed.
        self._landing: asyncio.Future[None] | None = None
        self._next_history: list[HistoryMessage] | None = None
        self._landing_round: list[ToolCallRecord] = []
        self._resume_round = resume_round
        self.usage: Usage = run.record.usage
        self._partial_text: list[str] = []
        self._in_model_call = False
        self._last_stop_reason: StopReason | None = StopReason.TOOL_USE if resume_round else None
        self._suspended = False
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        # What the model/prompt hooks decided for this run (None until they have run).
        self._model_ref: str | None = None
        self._system_prompt: str | None = None
        self._prepend_context = ""
        self._last_call_usage = Usage()
        # A resolved result not yet committed, carried into the next commit of the round.
        self._carry: tuple[list[SequencedEvent], list[TranscriptEntry], list[ToolCallRecord]] = ([], [], [])

    # ------------------------------------------------------------------ entry points
    async def execute(self) -> None:
        session_log.bind_run(self.actor.tenant, self.actor.session_id, self.run.run_id)
        try:
            if self._resume_round is not None:
                self.actor.round = self._resume_round
                await self._complete_round()
            await self._loop()
        except asyncio.CancelledError:
            if self.run.admission_failed:
                return  # the run never existed: nothing to finish
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self.run.admitted.wait()
            await self._land()
            # Background processes this run started die with it (exec background).
            await self.actor.deps.catalog.run_cancelled(self.actor.tenant, self.actor.session_id, self.run.run_id)
            if self.run.record.status is RunStatus.FINISHED:
                return  # the stop came while the terminal commit landed: the run has its one run_finished
            await self._finish_stopped()
        except _RunFailed as failure:
            await self.run.admitted.wait()
            await self._land()
            await self._close_round(failure.detail.message, ResolvedBy.STOP)
            await self._finish(
                RunOutcome.FAILED,
                reason=failure.reason,
                stop_reason=failure.stop_reason,
                error=failure.detail,
                turn_error=failure.detail if failure.stop_reason is StopReason.ERROR else None,
            )
        except Exception as exc:
            logger.exception("run %s failed internally", self.run.run_id, extra={"category": "system"})
            await self.run.admitted.wait()
            with contextlib.suppress(Exception):
                await self._land()  # its failure is the one being handled, or it is logged by commit
            detail = ErrorDetail(
                code=ErrorCode.INTERNAL, reason="INTERNAL", message=f"internal error: {type(exc).__name__}"
            )
            try:
                await self._close_round("cancelled: internal error", ResolvedBy.STOP)
            except Exception:
                logger.exception("could not close the tool round of run %s", self.run.run_id)
            await self._finish(RunOutcome.FAILED, reason=RunReason.INTERNAL, stop_reason=StopReason.ERROR, error=detail)
        finally:
            for task in self._tasks.values():
                task.cancel()
            self.actor.run_task_done(self.run, suspended=self._suspended)

    async def close_suspended(self, reason: RunReason) -> None:
        """Stops a suspended run: its pending hosted calls resolve as errors, then the run ends STOPPED."""
        from general_agent_server.sessions.live import stop_message

        message, resolved_by = stop_message(reason)
        await self._close_round(message, resolved_by)
        await self._finish(RunOutcome.STOPPED, reason=reason, stop_reason=StopReason.TOOL_USE)
        self.actor.run_task_done(self.run, suspended=False)

    # ------------------------------------------------------------------ the loop
    def _limits(self) -> tuple[int, int, float]:
        limits = self.actor.record.config.limits
        settings = self.actor.settings
        calls = min(
            limits.max_model_calls_per_run or settings.max_model_calls_per_run, settings.max_model_calls_per_run
        )
        tools = min(limits.max_tool_calls_per_run or settings.max_tool_calls_per_run, settings.max_tool_calls_per_run)
        deadline = min(limits.run_deadline_seconds or settings.run_deadline_seconds, settings.run_deadline_seconds)
        return calls, tools, deadline

    async def _loop(self) -> None:
        actor, run = self.actor, self.run
        model_ref = run.model_ref
        max_calls, _, deadline = self._limits()
        while True:
            if self.usage.model_calls >= max_calls:
                raise _limit_reached(
                    RunReason.MAX_MODEL_CALLS, "max_model_calls_per_run", max_calls, self._last_stop_reason
                )
            if utcnow() - run.record.started_at > timedelta(seconds=deadline):
                raise _RunFailed(
                    RunReason.RUN_DEADLINE_EXCEEDED,
                    ErrorDetail(
                        code=ErrorCode.DEADLINE_EXCEEDED,
                        reason="RUN_DEADLINE_EXCEEDED",
                        message=f"the run exceeded run_deadline ({deadline:g}s)",
                    ),
                    self._last_stop_reason,
                )
            if run.credential is None:
                run.credential = actor.deps.credentials(actor)
                if run.credential is None:
                    raise _RunFailed(
                        RunReason.NO_API_KEY,
                        ErrorDetail(
                            code=ErrorCode.FAILED_PRECONDITION,
                            reason="NO_API_KEY",
                            message="no API key resolves for this session to continue the run",
                        ),
                        self._last_stop_reason,
                    )
            if self._first_history is None and actor.record.pending_injections:
                await self._land()  # injections are committed after the round's results
                await self._deliver_injections()
            tools = actor.toolset()
            config = actor.record.config
            history = (
                self._first_history or (self._next_history if self._landing is not None else None) or actor.history
            )
            self._first_history = self._next_history = None
            if self._model_ref is None:
                if run.prompt_plan is None:
                    # First model call of the run, or a continuation in a new process: ask the hooks.
                    self._model_ref = run.model_ref
                    await self._prepare_prompt(history)
                    run.prompt_plan = (self._model_ref, self._system_prompt, self._prepend_context)
                else:
                    self._model_ref, self._system_prompt, self._prepend_context = run.prompt_plan
            model_ref = self._model_ref
            request = build_request(
                config=config,
                model_ref=model_ref,
                system_prompt=config.system_prompt if self._system_prompt is None else self._system_prompt,
                history=history,
                tools=tools.definitions(),
                max_tokens_cap=actor.settings.max_tokens_cap,
                prepend_context=self._prepend_context,
                run_id=run.run_id,
            )
            complete = await self._call_model(request, run.credential)
            if complete is None:
                return
            if not await self._after_model_call(complete, model_ref, tools):
                return

    async def _call_model(self, request: ModelRequest, credential: Credential) -> MessageComplete | None:
        """One model call, its deltas emitted as they stream. A stream that breaks after the response
        started is retried under the retry budget (the abandoned attempt's partial text is reported with
        turn_complete{error} and goes to the transcript marked aborted, never to the model history); when
        the budget is spent the run ends FAILED/PROVIDER_ERROR and this returns None."""
        actor, run = self.actor, self.run
        settings = actor.settings
        attempt = 0
        while True:
            try:
                return await self._stream_once(request, credential)
            except ModelCallError as error:
                await run.admitted.wait()
                await self._land()
                await actor.flush_deltas()
                self._in_model_call = False
                self.usage = self.usage + error.partial_usage
                detail = provider_error_detail(error)
                # The failed call's turn_complete{error}; its partial text goes to the transcript only.
                closed = actor.stamp(run.run_id, TurnComplete(stop_reason=StopReason.ERROR, error=detail))
                transcript = self._aborted_partial(closed.sequence)
                if error.retryable and attempt < settings.model_stream_retries:
                    attempt += 1
                    await actor.commit(events=[closed], transcript=transcript)
                    await asyncio.sleep(min(8.0, settings.model_retry_backoff_seconds * 2 ** (attempt - 1)))
                    continue
                await self._finish(
                    RunOutcome.FAILED,
                    reason=RunReason.PROVIDER_ERROR,
                    stop_reason=StopReason.ERROR,
                    error=detail,
                    lead_events=[closed],
                    transcript=transcript,
                )
                return None

    def _aborted_partial(self, sequence: int) -> list[TranscriptEntry]:
        """The text a failed or aborted model call streamed, for the transcript only."""
        partial = "".join(self._partial_text)
        if not partial:
            return []
        return [self.actor.transcript_entry(self.run.run_id, AssistantEntry(text=partial, aborted=True), sequence)]

    async def _stream_once(self, request: ModelRequest, credential: Credential) -> MessageComplete:
        actor, run = self.actor, self.run
        self._partial_text = []
        self._in_model_call = True
        complete: MessageComplete | None = None
        async for item in actor.model.stream(request, credential):
            if not run.admitted.is_set():
                await run.admitted.wait()
            if self._landing is not None:
                await self._land()
            if isinstance(item, TextDelta):
                self._partial_text.append(item.text)
                await actor.emit_delta(run.run_id, AssistantDelta(text=item.text), first=item.first)
            elif isinstance(item, ThinkingDelta):
                await actor.emit_delta(run.run_id, ReasoningDelta(text=item.text), first=item.first)
            elif isinstance(item, ThinkingBlockEnd):
                await actor.emit_buffered(run.run_id, ReasoningEnd())
            else:
                complete = item
        await self._land()
        await actor.flush_deltas()
        self._in_model_call = False
        if complete is None:
            raise RuntimeError("model stream ended without a message")
        return complete

    async def _deliver_injections(self) -> None:
        """Steering messages go to the model at its next call, after that call's tool results (spec 5.1)."""
        actor, run = self.actor, self.run
        pending = actor.record.pending_injections
        if not pending:
            return
        blocks = tuple(block for parts in pending for block in user_content_blocks(parts))
        events = [actor.stamp(run.run_id, MessageInjected(input=parts)) for parts in pending]
        await actor.commit(
            events=events,
            history=[HistoryMessage(role="user", content=blocks, run_id=run.run_id)],
            # Only what was delivered leaves the queue: a message injected meanwhile waits for the next call.
            derive=lambda record: {"pending_injections": record.pending_injections[len(pending) :]},
        )

    async def _after_model_call(self, complete: MessageComplete, model_ref: str, tools: ToolSet) -> bool:
        """Commits the assistant message; returns True when the loop makes another model call."""
        actor, run = self.actor, self.run
        self.usage = self.usage + complete.usage
        self._last_call_usage = complete.usage
        stop_reason = _STOP_REASONS.get(complete.stop_reason or "", StopReason.ERROR)
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
        if tool_uses:
            # Seed hook order: the assistant preamble is written before the round's before_tool_call hooks.
            transcript = await actor.hooks.filter_transcript(transcript)
            return await self._tool_round(tool_uses, assistant, events, transcript, changes, tools)
        if complete.stop_reason == "refusal":
            detail = ErrorDetail(
                code=ErrorCode.FAILED_PRECONDITION, reason="MODEL_REFUSAL", message="the model refused to continue"
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
        if not actor.record.pending_injections:
            try:
                await self._finish(
                    RunOutcome.COMPLETED,
                    stop_reason=stop_reason,
                    lead_events=events,
                    transcript=transcript,
                    history=[assistant],
                    **changes,
                )
                return False
            except CommitRefused:
                pass  # a steering message was committed just before the end: it is delivered below
        # The model would end the run with a steering message undelivered: one more call (spec 5.1).
        events.append(actor.stamp(run.run_id, TurnComplete(stop_reason=stop_reason)))
        await actor.commit(events=events, transcript=transcript, history=[assistant], **changes)
        return True

    # ------------------------------------------------------------------ tool rounds
    async def _tool_round(
        self,
        tool_uses: list[dict[str, Any]],
        assistant: HistoryMessage,
        events: list[SequencedEvent],
        transcript: list[TranscriptEntry],
        changes: dict[str, Any],
        tools: ToolSet,
    ) -> bool:
        """Spec 5.3: for each call in order, tool_call (then tool_error at once for an unknown tool or
        invalid input); local calls run concurrently with results in call order; hosted calls suspend."""
        actor, run = self.actor, self.run
        _, max_tools, _ = self._limits()
        round_index = self.usage.model_calls
        records: list[ToolCallRecord] = []
        over_limit = run.record.tool_calls + len(tool_uses) > max_tools
        now = utcnow()
        for position, block in enumerate(tool_uses):
            call_id, name = str(block["id"]), str(block["name"])
            arguments = block.get("input")
            spec = tools.lookup(name)
            error: str | None
            if over_limit:
                error = f"not executed: the run reached max_tool_calls_per_run ({max_tools})"
            elif spec is None:
                error = f"Tool {name} not found"
            else:
                error = tools.validation_error(name, arguments)
                if error is None and isinstance(arguments, dict):
                    arguments, error = await self._before_tool_call(name, call_id, arguments, tools)
            # tool_call carries the final input (after before_tool_call rewrites), spec 5.3.
            input_json = json.dumps(arguments if arguments is not None else {}, separators=(",", ":"))
            call = actor.stamp(run.run_id, ToolCall(call_id=call_id, tool_name=name, input_json=input_json))
            events.append(call)
            call_entry = actor.transcript_entry(
                run.run_id, ToolCallEntry(call_id=call_id, tool_name=name, input_json=input_json), call.sequence
            )
            transcript.extend(await actor.hooks.filter_transcript([call_entry]))
            record = ToolCallRecord(
                tenant=actor.tenant,
                session_id=actor.session_id,
                run_id=run.run_id,
                round_index=round_index,
                position=position,
                call_id=call_id,
                tool_name=name,
                input_json=input_json,
                kind=CallKind.HOSTED if spec is not None and spec.kind is ToolKind.HOSTED else CallKind.LOCAL,
            )
            if error is not None:
                result = CallResult(content=(TextPart(text=error),), is_error=True)
                actor.hooks.after_tool_call(run.run_id, name, call_id, input_json, result)
                failed = actor.stamp(run.run_id, result_event(record, result))
                events.append(failed)
                transcript.extend(
                    await actor.hooks.filter_transcript([self._result_entry(record, result, failed.sequence)])
                )
                record = replace(
                    record,
                    status=CallStatus.RESOLVED,
                    result=result,
                    resolved_by=ResolvedBy.EXECUTED,
                    resolve_sequence=failed.sequence,
                )
            elif spec is not None and spec.kind is ToolKind.HOSTED:
                record = replace(record, deadline=now + actor.hosted_deadline(spec))
            records.append(record)
        run.record = replace(run.record, tool_calls=run.record.tool_calls + len(tool_uses), usage=self.usage)
        actor.round = records
        await actor.commit(
            events=events,
            transcript=transcript,
            history=[assistant],
            tool_calls=records,
            runs=[run.record],
            transcript_filtered=True,
            **changes,
        )
        if over_limit:
            await self._complete_round()
            raise _limit_reached(RunReason.MAX_TOOL_CALLS, "max_tool_calls_per_run", max_tools, StopReason.TOOL_USE)
        await self._run_local(tools)
        hosted = [r for r in actor.round if r.status is CallStatus.PENDING and r.kind is CallKind.HOSTED]
        if hosted:
            await self._suspend(hosted)
            return False
        await self._complete_round(overlap=True)
        return True

    async def _land(self) -> None:
        """Waits for the overlapped results commit, if any. Its failure surfaces here, with the round put
        back so the failure path closes it as if the commit had been awaited in place."""
        landing, self._landing = self._landing, None
        if landing is None:
            return
        try:
            await landing
        except Exception:
            self.actor.round, self._landing_round = self._landing_round, []
            raise
        self._landing_round = []

    def _remaining_seconds(self) -> float:
        _, _, deadline = self._limits()
        return max(0.0, deadline - (utcnow() - self.run.record.started_at).total_seconds())

    async def _run_hook(self, hook: str, event: dict[str, Any], **context: str) -> dict[str, Any] | None:
        """A modifying hook, its timeouts capped by the run's remaining deadline (spec 7)."""
        try:
            outcome = await self.actor.hooks.run(
                hook, event, self.run.run_id, budget=self._remaining_seconds(), **context
            )
        except HookFailedError as exc:
            raise _RunFailed(
                RunReason.HOOK_FAILED,
                ErrorDetail(code=ErrorCode.FAILED_PRECONDITION, reason="HOOK_FAILED", message=str(exc)),
                self._last_stop_reason,
            ) from None
        return outcome.result if outcome is not None else None

    async def _before_tool_call(
        self, name: str, call_id: str, arguments: dict[str, Any], tools: ToolSet
    ) -> tuple[dict[str, Any], str | None]:
        """A block becomes the call's error; rewritten params are shallow-merged over the original
        arguments and validated again (spec 7)."""
        result = await self._run_hook(
            "before_tool_call",
            {"toolName": name, "params": arguments, "runId": self.run.run_id, "toolCallId": call_id},
            toolName=name,
            toolCallId=call_id,
        )
        if not result:
            return arguments, None
        if result.get("block") is True:
            return arguments, str(result.get("blockReason") or "Tool call blocked by plugin hook")
        params = result.get("params")
        if isinstance(params, dict):
            arguments = {**arguments, **params}
            return arguments, tools.validation_error(name, arguments)
        return arguments, None

    async def _prepare_prompt(self, history: list[HistoryMessage]) -> None:
        """The model/prompt hooks, once per run before its first model call (spec 7; seed §5.3 order:
        before_model_resolve, before_agent_start, before_prompt_build)."""
        hooks = self.actor.hooks
        if not hooks.wants(RUN_HOOKS):
            return
        # The admission's transcript writes (and their write-path hooks) come first in hook order (seed 5.4).
        await self.run.admitted.wait()
        message = next((m for m in reversed(history) if m.role == "user" and m.run_id == self.run.run_id), None)
        prompt = prompt_text(list(message.content) if message else [])
        before = MessageHistory(tuple(m.api_message() for m in history if m.run_id != self.run.run_id))
        answers = self.run.model_hooks
        if answers is None:
            # A continuation in a new process: the model was resolved before; ask again for the prompt fields.
            answers = await ask_model_hooks(
                hooks,
                self.run.run_id,
                prompt,
                [m for m in history if m.run_id != self.run.run_id],
                self.run.model_ref,
                budget=self._remaining_seconds(),
            )
        if answers.failure is not None:
            raise _RunFailed(
                RunReason.HOOK_FAILED,
                ErrorDetail(code=ErrorCode.FAILED_PRECONDITION, reason="HOOK_FAILED", message=str(answers.failure)),
                self._last_stop_reason,
            )
        legacy = answers.legacy
        build = await self._run_hook("before_prompt_build", {"prompt": prompt, "messages": before})
        self._model_ref = answers.model_ref
        merged: dict[str, Any] = {}
        for result in (build, legacy):  # the new hook first, then the legacy one
            if not result:
                continue
            if result.get("systemPrompt") and "systemPrompt" not in merged:
                merged["systemPrompt"] = result["systemPrompt"]
            for key in ("prependContext", "prependSystemContext", "appendSystemContext"):
                if result.get(key):
                    merged[key] = f"{merged[key]}\n\n{result[key]}" if merged.get(key) else result[key]
        self._system_prompt = system_prompt_with_context(self.actor.record.config.system_prompt, merged or None)
        self._prepend_context = str(merged.get("prependContext", ""))
        provider, _, model = self._model_ref.rpartition("/")
        hooks.fire(
            "llm_input",
            {
                "runId": self.run.run_id,
                "sessionId": self.actor.session_id,
                "provider": provider or "anthropic",
                "model": model,
                "systemPrompt": self._system_prompt,
                "prompt": f"{self._prepend_context}\n\n{prompt}" if self._prepend_context else prompt,
                "historyMessages": before,
                "imagesCount": sum(1 for b in (message.content if message else ()) if b.get("type") == "image"),
            },
            self.run.run_id,
        )

    def _result_entry(self, record: ToolCallRecord, result: CallResult, sequence: int) -> TranscriptEntry:
        return self.actor.transcript_entry(
            self.run.run_id,
            ToolResultEntry(
                call_id=record.call_id,
                tool_name=record.tool_name,
                output=result.content,
                details_json=result.details_json,
                is_error=result.is_error,
            ),
            sequence,
        )

    async def _run_local(self, tools: ToolSet) -> None:
        actor, run = self.actor, self.run
        local = [r for r in actor.round if r.status is CallStatus.PENDING and r.kind is CallKind.LOCAL]
        if not local:
            return
        actor.workspace.mkdir(parents=True, exist_ok=True)
        for record in local:
            context = ToolContext(
                tenant=actor.tenant,
                session_id=actor.session_id,
                run_id=run.run_id,
                call_id=record.call_id,
                workspace=actor.workspace,
                checkpoints=actor.deps.checkpoints,
            )
            self._tasks[record.call_id] = asyncio.create_task(
                tools.execute(record.tool_name, json.loads(record.input_json), context),
                name=f"tool-{record.tool_name}-{record.call_id}",
            )
        started = time.monotonic()
        hosted_pending = any(r.status is CallStatus.PENDING and r.kind is CallKind.HOSTED for r in actor.round)
        for index, record in enumerate(local):
            outcome = await self._tasks[record.call_id]
            del self._tasks[record.call_id]
            result = CallResult(content=outcome.content, details_json=outcome.details_json, is_error=outcome.is_error)
            elapsed_ms = int((time.monotonic() - started) * 1000)
            actor.hooks.after_tool_call(
                run.run_id, record.tool_name, record.call_id, record.input_json, result, elapsed_ms
            )
            # The round's last result rides with the round's results message (one commit fewer per round).
            carry = index == len(local) - 1 and not hosted_pending
            await self._resolve_local(record, result, ResolvedBy.EXECUTED, carry=carry)

    async def _resolve_local(
        self, record: ToolCallRecord, result: CallResult, resolved_by: ResolvedBy, *, carry: bool = False
    ) -> None:
        actor = self.actor
        event = actor.stamp(self.run.run_id, result_event(record, result))
        resolved = replace(
            record, status=CallStatus.RESOLVED, result=result, resolved_by=resolved_by, resolve_sequence=event.sequence
        )
        actor.round = [resolved if r.call_id == record.call_id else r for r in actor.round]
        entry = self._result_entry(record, result, event.sequence)
        if carry:
            self._carry = ([event], [entry], [resolved])
            return
        await actor.commit(events=[event], transcript=[entry], tool_calls=[resolved])

    def _take_carry(self) -> tuple[list[SequencedEvent], list[TranscriptEntry], list[ToolCallRecord]]:
        carried, self._carry = self._carry, ([], [], [])
        return carried

    async def _suspend(self, hosted: list[ToolCallRecord]) -> None:
        """Commits SUSPENDED, then exposes every hosted call at once (spec 6)."""
        actor, run = self.actor, self.run
        events = [
            actor.stamp(
                run.run_id,
                HostedToolCall(call_id=r.call_id, tool_name=r.tool_name, input_json=r.input_json, deadline=r.deadline),
            )
            for r in hosted
        ]
        pending = tuple(r.call_id for r in hosted)
        events.append(
            actor.stamp(
                run.run_id,
                RunFinished(
                    outcome=RunOutcome.SUSPENDED,
                    stop_reason=StopReason.TOOL_USE,
                    pending_call_ids=pending,
                    usage=self.usage,
                ),
            )
        )
        run.record = replace(run.record, status=RunStatus.SUSPENDED, usage=self.usage)
        await actor.commit(events=events, runs=[run.record], state=SessionState.SUSPENDED, pending_call_ids=pending)
        actor.arm_deadlines(hosted)
        self._suspended = True

    async def _complete_round(self, *, turn_complete: bool = True, overlap: bool = False) -> None:
        """All results are in: one user message with them in call order, then turn_complete{tool_use}.

        With `overlap`, the commit lands while the next model request goes out (like the admission): the
        request is built from the history with this message, and the call emits nothing until the commit
        has landed, so event order and durability are as if it had been awaited here."""
        actor, run = self.actor, self.run
        records = sorted(actor.round, key=lambda r: r.position)
        if not records:
            return
        message = HistoryMessage(role="user", content=tuple(tool_result_block(r) for r in records), run_id=run.run_id)
        events, transcript, resolved = self._take_carry()
        if turn_complete:
            events.append(actor.stamp(run.run_id, TurnComplete(stop_reason=StopReason.TOOL_USE)))
        commit = actor.commit(events=events, transcript=transcript, tool_calls=resolved, history=[message])
        if overlap:
            self._next_history = [*actor.history, message]
            self._landing = asyncio.ensure_future(commit)
            self._landing_round, actor.round = actor.round, []
            return
        await commit
        actor.round = []

    async def _close_round(self, message: str, resolved_by: ResolvedBy) -> None:
        """Stops whatever of the round is unfinished: running tools are cancelled, pending calls get an
        is_error result, and the round's results message keeps the history valid."""
        actor = self.actor
        for task in self._tasks.values():
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        pending = [r for r in actor.round if r.status is CallStatus.PENDING]
        if not actor.round:
            return
        events, transcript, resolved_records = self._take_carry()
        result = CallResult(content=(TextPart(text=message),), is_error=True)
        for record in pending:
            event = actor.stamp(self.run.run_id, result_event(record, result))
            events.append(event)
            transcript.append(self._result_entry(record, result, event.sequence))
            resolved_records.append(
                replace(
                    record,
                    status=CallStatus.RESOLVED,
                    result=result,
                    resolved_by=resolved_by,
                    resolve_sequence=event.sequence,
                )
            )
        by_id = {r.call_id: r for r in resolved_records}
        actor.round = [by_id.get(r.call_id, r) for r in actor.round]
        records = sorted(actor.round, key=lambda r: r.position)
        history = [
            HistoryMessage(role="user", content=tuple(tool_result_block(r) for r in records), run_id=self.run.run_id)
        ]
        events.append(actor.stamp(self.run.run_id, TurnComplete(stop_reason=StopReason.TOOL_USE)))
        await actor.commit(
            events=events, transcript=transcript, tool_calls=resolved_records, history=history, pending_call_ids=()
        )
        actor.round = []
        actor.disarm_deadlines()

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
        from general_agent_server.sessions.live import stop_message

        actor, run = self.actor, self.run
        reason = run.stop_reason or RunReason.CANCELLED
        lead: list[SequencedEvent] = []
        transcript: list[TranscriptEntry] = []
        await actor.flush_deltas()  # what streamed before the stop still reaches watchers, in order
        if self._in_model_call:
            lead.append(actor.stamp(run.run_id, TurnComplete(stop_reason=StopReason.ABORTED)))
            transcript.extend(self._aborted_partial(lead[0].sequence))
        else:
            message, resolved_by = stop_message(reason)
            await self._close_round(message, resolved_by)
        # The end of the shutdown grace is a failure of the server, not a choice of the host.
        interrupted = reason is RunReason.INTERRUPTED
        await self._finish(
            RunOutcome.FAILED if interrupted else RunOutcome.STOPPED,
            reason=reason,
            error=ErrorDetail(
                code=ErrorCode.UNAVAILABLE, reason="INTERRUPTED", message="the server shut down during the run"
            )
            if interrupted
            else None,
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
        await actor.flush_deltas()
        events = list(lead_events or [])
        closes_model_call = outcome is RunOutcome.COMPLETED or reason in (
            RunReason.PROVIDER_ERROR,
            RunReason.MODEL_REFUSAL,
            RunReason.OUTPUT_TRUNCATED,
        )
        model_call_closed = any(isinstance(e.body, TurnComplete) for e in events)
        if stop_reason is not None and closes_model_call and not model_call_closed:
            events.append(actor.stamp(run.run_id, TurnComplete(stop_reason=stop_reason, error=turn_error)))
        finished = actor.stamp(
            run.run_id,
            RunFinished(outcome=outcome, reason=reason, stop_reason=stop_reason, error=error, usage=self.usage),
        )
        events.append(finished)
        record = replace(
            run.record.finished(outcome, reason, sequence=finished.sequence, at=finished.create_time), usage=self.usage
        )

        def end_queue(session: SessionRecord) -> dict[str, object]:
            # A run completes only with its steering queue empty (decided in commit order, so a message
            # injected just before is not lost); a run that stops or fails drops what it did not deliver.
            if outcome is RunOutcome.COMPLETED and session.pending_injections:
                raise CommitRefused
            return {"pending_injections": ()}

        previous, run.record = run.record, record
        try:
            await actor.commit(
                events=events,
                transcript=transcript,
                history=history,
                runs=[record],
                state=SessionState.IDLE,
                active_run_id="",
                pending_call_ids=(),
                derive=end_queue,
                **changes,
            )
        except CommitRefused:
            run.record = previous
            raise
        except Exception:
            # The store failed at the very end: never leave the session wedged in memory. Start-up recovery
            # marks the run INTERRUPTED if the process dies before a later commit.
            logger.exception("could not commit the end of run %s", run.run_id, extra={"category": "system"})
            actor.record = replace(actor.record, state=SessionState.IDLE, active_run_id="", pending_call_ids=())
            actor.publish(events)
        self._fire_end_hooks(outcome, stop_reason, error)

    def _fire_end_hooks(self, outcome: RunOutcome, stop_reason: StopReason | None, error: ErrorDetail | None) -> None:
        """agent_end, then llm_output, dispatched after run_finished (spec 7)."""
        hooks, run = self.actor.hooks, self.run
        if not hooks.wants(END_HOOKS):
            return
        produced = [m for m in self.actor.history if m.run_id == run.run_id]
        success = outcome is RunOutcome.COMPLETED
        event: dict[str, Any] = {
            "messages": MessageHistory(tuple(m.api_message() for m in produced)),
            "success": success,
            "durationMs": int((utcnow() - run.record.started_at).total_seconds() * 1000),
        }
        if not success:
            event["error"] = error.message if error is not None else f"assistant stop reason: {stop_reason}"
        hooks.fire("agent_end", event, run.run_id)
        assistants = [m for m in produced if m.role == "assistant"]
        texts = ["\n".join(b["text"] for b in m.content if b.get("type") == "text") for m in assistants]
        model_ref = self._model_ref or run.model_ref
        provider, _, model = model_ref.rpartition("/")
        output: dict[str, Any] = {
            "runId": run.run_id,
            "sessionId": self.actor.session_id,
            "provider": provider or "anthropic",
            "model": model,
            "assistantTexts": texts,
        }
        if assistants:
            usage = self._last_call_usage
            output["lastAssistant"] = without_images(assistants[-1].api_message())
            output["usage"] = {
                "input": usage.input_tokens,
                "output": usage.output_tokens,
                "cacheRead": usage.cache_read_input_tokens,
                "cacheWrite": usage.cache_creation_input_tokens,
                "total": usage.context_input_tokens + usage.output_tokens,
            }
        hooks.fire("llm_output", output, run.run_id)
