"""Compaction: the older part of a session's history replaced by one summary the model writes, the most recent
turns kept verbatim (docs/protocol.md, compaction).

- The kept suffix is the last `compaction_keep_recent_turns` user turns with their tool exchanges: a turn starts
  at a user message that is not only tool results, so a tool_use is never separated from its tool_result. A
  history with nothing older than that suffix is a no-op (`compacted=false`, no events, no hooks).
- compaction_started commits first; before_compaction is awaited within its bound; the summary is written
  (runs/summarise.py) under `compaction_timeout`; then one commit replaces the history, appends the transcript's
  compaction entry, clears the usage snapshot, adds the summary's usage to the session's, and announces
  compaction_finished. A crash before that commit leaves the old history.
- A failed summary leaves the history unchanged: compaction_finished{compacted=false, error} and an OK result
  carrying the error.

The caller holds the session's command lock (an idle session) or is the run's driver (automatic compaction and
overflow recovery), so nothing else changes the history meanwhile."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from general_agent_server.domain import codec
from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import CompactionFinished, CompactionReason, CompactionStarted
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionRecord, Usage
from general_agent_server.domain.transcript import CompactionEntry
from general_agent_server.hooks.payloads import MessageHistory
from general_agent_server.model.catalog import capabilities, provider_model_id
from general_agent_server.model.port import Credential, ModelCallError
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.summarise import SUMMARY_HEADER, Summary, SummaryFailed, estimate_tokens, summarise

logger = logging.getLogger(__name__)

# The summariser's input is capped at this share of the model's context window.
SUMMARISER_INPUT_SHARE = 0.8
# MaybeCompactByTokens' defaults, and automatic compaction's cooldown when the session sets none.
DEFAULT_THRESHOLD_PCT = 85
DEFAULT_COOLDOWN = 60.0


def compaction_due(threshold_pct: float, cooldown_seconds: float) -> Callable[[SessionRecord], bool]:
    """Whether a session is due: its latest usage snapshot at or over the threshold, and its last compaction at
    least the cooldown ago. Without a snapshot (no model call since the last reset or compaction) it is not."""

    def due(record: SessionRecord) -> bool:
        snapshot = record.usage_snapshot
        if snapshot is None or snapshot.used_pct < threshold_pct:
            return False
        last = record.last_compaction_time
        return last is None or (utcnow() - last).total_seconds() >= cooldown_seconds

    return due


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionOutcome:
    """What a compaction did; `usage` is the summariser's (a run adds it to its own)."""

    reason: CompactionReason
    compacted: bool
    messages_before: int
    messages_after: int
    tokens_after: int = 0
    tokens_after_estimated: bool = True
    error: ErrorDetail | None = None
    usage: Usage = field(default_factory=Usage)


def outcome_to_json(outcome: CompactionOutcome) -> dict[str, Any]:
    """The outcome as an idempotent replay stores it."""
    return {
        "reason": outcome.reason.value,
        "compacted": outcome.compacted,
        "messages_before": outcome.messages_before,
        "messages_after": outcome.messages_after,
        "tokens_after": outcome.tokens_after,
        "tokens_after_estimated": outcome.tokens_after_estimated,
        "error": codec.ERROR_DETAIL.to_jsonable(outcome.error) if outcome.error is not None else None,
    }


def outcome_from_json(value: dict[str, Any]) -> CompactionOutcome:
    error = value.get("error")
    return CompactionOutcome(
        reason=CompactionReason(value["reason"]),
        compacted=bool(value["compacted"]),
        messages_before=int(value["messages_before"]),
        messages_after=int(value["messages_after"]),
        tokens_after=int(value["tokens_after"]),
        tokens_after_estimated=bool(value["tokens_after_estimated"]),
        error=codec.ERROR_DETAIL.loads(json.dumps(error)) if error else None,
    )


def turn_starts(history: Sequence[HistoryMessage]) -> list[int]:
    """Indices of the messages that start a user turn: user messages that are not only tool results."""
    starts = []
    for index, message in enumerate(history):
        if message.role != "user":
            continue
        if any(block.get("type") != "tool_result" for block in message.content):
            starts.append(index)
    return starts


def split(history: Sequence[HistoryMessage], keep_turns: int) -> int:
    """Where the kept suffix starts (0: nothing older to compact)."""
    starts = turn_starts(history)
    if len(starts) <= keep_turns:
        return 0
    return starts[len(starts) - keep_turns]


def summary_message(summary: str, run_id: str) -> HistoryMessage:
    return HistoryMessage(
        role="user", content=({"type": "text", "text": f"{SUMMARY_HEADER}\n\n{summary}"},), run_id=run_id
    )


class Compactor:
    def __init__(self, host: RunHost, *, run_id: str, model_ref: str, credential: Credential) -> None:
        self._host = host
        self._run_id = run_id
        self._model_ref = model_ref
        self._credential = credential

    async def compact(self, reason: CompactionReason, instructions: str = "") -> CompactionOutcome:
        host, ledger = self._host, self._host.ledger
        history = list(ledger.history)
        cut = split(history, max(1, host.settings.compaction_keep_recent_turns))
        if cut == 0:
            return CompactionOutcome(
                reason=reason,
                compacted=False,
                messages_before=len(history),
                messages_after=len(history),
                tokens_after=self.estimate(history),
            )
        older, kept = history[:cut], history[cut:]
        await ledger.commit(events=[ledger.stamp(self._run_id, CompactionStarted(reason=reason))])
        await host.hooks.fire_and_wait(
            "before_compaction",
            {
                "messageCount": len(history),
                "compactingCount": len(older),
                "tokenCount": snapshot.used_input_tokens
                if (snapshot := ledger.record.usage_snapshot) is not None
                else self.estimate(history),
                "messages": MessageHistory(tuple(m.api_message() for m in older)),
                "sessionFile": host.session_file,
            },
            self._run_id,
        )
        try:
            summary = await asyncio.wait_for(self._summarise(older, instructions), host.settings.compaction_timeout)
        except (ModelCallError, SummaryFailed, TimeoutError) as exc:
            return await self._failed(reason, history, exc)
        # The summary takes the run of the last message it replaces: a fork of a later state copies it.
        new_history = [summary_message(summary.text, older[-1].run_id), *kept]
        outcome = CompactionOutcome(
            reason=reason,
            compacted=True,
            messages_before=len(history),
            messages_after=len(new_history),
            tokens_after=self.estimate(new_history),
            usage=summary.usage,
        )
        finished = ledger.stamp(self._run_id, _finished_event(outcome))
        entry = CompactionEntry(summary=summary.text, messages_before=len(history), messages_after=len(new_history))
        await ledger.commit(
            events=[finished],
            transcript=[ledger.entry(self._run_id, entry, finished.sequence)],
            history=new_history,
            replace_history=True,
            usage_snapshot=None,
            cumulative_usage=ledger.record.cumulative_usage + summary.usage,
            last_compaction_time=utcnow(),
        )
        host.hooks.fire(
            "after_compaction",
            {
                "messageCount": len(new_history),
                "tokenCount": outcome.tokens_after,
                "compactedCount": len(older),
                "sessionFile": host.session_file,
            },
            self._run_id,
        )
        return outcome

    async def _summarise(self, older: list[HistoryMessage], instructions: str) -> Summary:
        settings = self._host.settings
        caps = capabilities(self._model_ref, settings.context_windows)
        return await summarise(
            self._host.model,
            self._credential,
            older,
            model_id=provider_model_id(self._model_ref),
            max_tokens=min(settings.compaction_summary_max_tokens, caps.max_output_tokens),
            input_cap_tokens=int(caps.context_window * SUMMARISER_INPUT_SHARE),
            instructions=instructions,
        )

    async def _failed(
        self, reason: CompactionReason, history: list[HistoryMessage], exc: Exception
    ) -> CompactionOutcome:
        """The history stays as it was; the failure is reported in compaction_finished and the result."""
        ledger = self._host.ledger
        logger.warning("compaction of session %s failed: %s", ledger.session_id, exc, extra={"category": "system"})
        if isinstance(exc, TimeoutError):
            timeout = self._host.settings.compaction_timeout
            error = ErrorDetail(
                code=ErrorCode.DEADLINE_EXCEEDED,
                reason="PROVIDER_ERROR",
                message=f"the summary was not written within compaction_timeout ({timeout:g}s)",
            )
        elif isinstance(exc, ModelCallError):
            error = ErrorDetail(
                code=ErrorCode.UNAVAILABLE, reason="PROVIDER_ERROR", message=f"the summary failed: {exc}"
            )
        else:
            error = ErrorDetail(code=ErrorCode.UNAVAILABLE, reason="PROVIDER_ERROR", message=str(exc))
        partial = exc.partial_usage if isinstance(exc, ModelCallError) else Usage()
        outcome = CompactionOutcome(
            reason=reason,
            compacted=False,
            messages_before=len(history),
            messages_after=len(history),
            tokens_after=self.estimate(history),
            error=error,
            usage=partial,
        )
        await ledger.commit(
            events=[ledger.stamp(self._run_id, _finished_event(outcome))],
            cumulative_usage=ledger.record.cumulative_usage + partial,
        )
        return outcome

    def estimate(self, history: Sequence[HistoryMessage]) -> int:
        """Context tokens of a request with this history (system prompt and tools included), estimated."""
        config = self._host.ledger.record.config
        tools = self._host.toolset().definitions()
        return (
            estimate_tokens(config.system_prompt)
            + estimate_tokens(tools)
            + estimate_tokens([m.api_message() for m in history])
        )


def _finished_event(outcome: CompactionOutcome) -> CompactionFinished:
    return CompactionFinished(
        reason=outcome.reason,
        tokens_after=outcome.tokens_after,
        tokens_after_estimated=outcome.tokens_after_estimated,
        compacted=outcome.compacted,
        messages_before=outcome.messages_before,
        messages_after=outcome.messages_after,
        error=outcome.error,
    )
