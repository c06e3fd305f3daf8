"""Structured log lines about sessions, in the categories the README lists (Operating it): `system_prompt`,
`tool_call`, `tool_result`, `assistant`, `system` (runs starting and ending) from each committed step,
`hook` from the hook runner, `model_request` and `provider_debug` from the model adapter.

Every line carries `tenant`, `session_id` and `run_id` (explicitly, or from the run it is logged in:
`bind_run`); the formatter adds `request_id`. Metadata (names, ids, sizes, outcomes) is logged at INFO.
Bodies (prompts, tool inputs and outputs, assistant text, hook payloads, model requests) are added only
when the logger is enabled for DEBUG, are built only then, and always pass through the redactor here,
in `_redacted`, the one place log bodies are made."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Sequence
from typing import Any

from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
from general_agent_server.domain.events import RunFinished, RunOutcome, RunStarted, SequencedEvent
from general_agent_server.domain.transcript import (
    AssistantEntry,
    CompactionEntry,
    SessionResetEntry,
    SystemPromptEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)
from general_agent_server.security.redaction import scrub

logger = logging.getLogger("general_agent_server.session")

# A body longer than this is cut (with a note of how much): a DEBUG log is not a transcript.
MAX_BODY_CHARS = 64 * 1024

# (tenant, session_id, run_id) of the run the current task executes.
_run: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar("session_log_run", default=None)


def bind_run(tenant: str, session_id: str, run_id: str) -> None:
    """Tags every line logged by the current task (and the tasks it starts) with this run."""
    _run.set((tenant, session_id, run_id))


def run_ids() -> tuple[str, str, str] | None:
    """The run bound to the current task, if any (the formatter's fallback for the ids)."""
    return _run.get()


def enabled() -> bool:
    """Whether any line would be written (a cheap test before building one)."""
    return logger.isEnabledFor(logging.INFO)


def _redacted(text: str) -> str:
    if len(text) > MAX_BODY_CHARS:
        text = f"{text[:MAX_BODY_CHARS]}…[{len(text) - MAX_BODY_CHARS} more characters]"
    return scrub(text)


def emit(
    category: str,
    message: str,
    *,
    ids: tuple[str, str, str] | None = None,
    body: Callable[[], str] | None = None,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """One line. `body` is called, and its text redacted, only when DEBUG is on; an INFO line then goes
    out at DEBUG with the body in it (a warning stays a warning), else at `level` without it."""
    with_body = body is not None and logger.isEnabledFor(logging.DEBUG)
    if not with_body and not logger.isEnabledFor(level):
        return
    data = {k: v for k, v in fields.items() if v is not None and v != ""}
    if "error" in data:  # error texts can quote what failed: they pass the redactor like bodies
        data["error"] = _redacted(str(data["error"]))
    if with_body and body is not None:
        data["body"] = _redacted(body())
        if level == logging.INFO:
            level = logging.DEBUG
    extra: dict[str, Any] = {"category": category, "data": data}
    if ids is not None:
        extra["tenant"], extra["session_id"], extra["run_id"] = ids
    logger.log(level, message, extra=extra)


def parts_text(parts: Sequence[ContentPart]) -> str:
    out = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, ImagePart):
            out.append(f"[image {part.mime_type}, {len(part.data)} bytes]")
    return "\n".join(out)


# ---------------------------------------------------------------------- committed steps


def committed(
    tenant: str, session_id: str, events: Sequence[SequencedEvent], transcript: Sequence[TranscriptEntry]
) -> None:
    """The lines of one committed step of a session: its transcript entries as stored (after the
    write-path hooks) and the start and end of runs. Called after every commit; cheap when logging is off."""
    if not logger.isEnabledFor(logging.INFO):
        return
    for event in events:
        if isinstance(event.body, RunStarted):
            _run_event(tenant, session_id, event)
    for entry in transcript:
        _entry(tenant, session_id, entry)
    for event in events:
        if isinstance(event.body, RunFinished):
            _run_event(tenant, session_id, event)


def _entry(tenant: str, session_id: str, entry: TranscriptEntry) -> None:
    ids = (tenant, session_id, entry.run_id)
    body = entry.body
    if isinstance(body, SystemPromptEntry):
        prompt = body.prompt
        emit(
            "system_prompt",
            "system prompt",
            ids=ids,
            body=lambda: prompt,
            model_ref=body.model_ref,
            chars=len(prompt),
            sequence=entry.sequence,
        )
    elif isinstance(body, AssistantEntry):
        text = body.text
        emit(
            "assistant",
            "assistant message",
            ids=ids,
            body=lambda: text,
            chars=len(text),
            aborted=body.aborted,
            sequence=entry.sequence,
        )
    elif isinstance(body, ToolCallEntry):
        arguments = body.input_json
        emit(
            "tool_call",
            f"tool call {body.tool_name}",
            ids=ids,
            body=lambda: arguments,
            tool_name=body.tool_name,
            call_id=body.call_id,
            input_chars=len(arguments),
            sequence=entry.sequence,
        )
    elif isinstance(body, ToolResultEntry):
        output = body.output
        emit(
            "tool_result",
            f"tool result {body.tool_name}",
            ids=ids,
            body=lambda: parts_text(output),
            tool_name=body.tool_name,
            call_id=body.call_id,
            is_error=body.is_error,
            output_parts=len(output),
            sequence=entry.sequence,
        )
    elif isinstance(body, CompactionEntry):
        emit("system", "history compacted", ids=ids, before=body.messages_before, after=body.messages_after)
    elif isinstance(body, SessionResetEntry):
        emit("system", "session reset", ids=ids, reason=body.reason)


def _run_event(tenant: str, session_id: str, event: SequencedEvent) -> None:
    ids = (tenant, session_id, event.run_id)
    body = event.body
    if isinstance(body, RunStarted):
        emit(
            "system",
            "run started",
            ids=ids,
            trigger=body.trigger.value,
            model_ref=body.model_ref,
            sequence=event.sequence,
        )
    elif isinstance(body, RunFinished):
        error = body.error
        emit(
            "system",
            f"run finished {body.outcome.value}",
            ids=ids,
            level=logging.WARNING if body.outcome is RunOutcome.FAILED else logging.INFO,
            outcome=body.outcome.value,
            reason=body.reason.value if body.reason else "",
            stop_reason=body.stop_reason.value if body.stop_reason else "",
            error=error.message if error is not None else "",
            input_tokens=body.usage.input_tokens,
            output_tokens=body.usage.output_tokens,
            model_calls=body.usage.model_calls,
            sequence=event.sequence,
        )
