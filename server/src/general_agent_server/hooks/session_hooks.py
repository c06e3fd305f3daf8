"""Where one session's run meets the hook runner (docs/hooks.md): the HookContext of each call with its per-run
`dispatch_seq`, awaited and fire-and-forget dispatch, and the write-path hooks every transcript entry
passes through before it is stored.

Write-path hooks change the transcript only, never the model history. Entries cross in the transcript
export's shapes (exports/transcript_json.py): a tool result as a toolResult message, anything else as its
JSONL export line; a replacement of another kind, or one that does not parse, is ignored with a warning."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol

from general_agent_server.domain.content import TextPart
from general_agent_server.domain.records import CallResult
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.transcript import ToolResultEntry, TranscriptEntry
from general_agent_server.exports.transcript_json import EntryShapeError, entry_from_hook_message, hook_message
from general_agent_server.hooks.registry import JsonObject
from general_agent_server.hooks.runner import HookOutcome, HookRunner
from general_agent_server.observability.port import Spans
from general_agent_server.tools.runtime import ToolOutcome

logger = logging.getLogger(__name__)

WRITE_PATH_HOOKS = frozenset({"tool_result_persist", "before_message_write"})


class HookScope(Protocol):
    """Where a session's hooks get its identity from (the session's ledger)."""

    @property
    def tenant(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def record(self) -> SessionRecord: ...


class SessionHooks:
    """The hooks of one loaded session. Without a hook runner every method is a cheap no-op."""

    def __init__(self, scope: HookScope, workspace: Path, runner: HookRunner | None) -> None:
        # Weak: the session owns its hooks, and a cycle would keep an evicted session's history and prompt in
        # memory until the cyclic garbage collector happens to run.
        self._scope_ref = weakref.ref(scope)
        self._workspace = workspace
        self.runner = runner
        self._dispatch_seq = 0
        # session_start fired in this process (session_end then pairs with it), and when.
        self.session_started = False
        self.started_at = time.monotonic()
        # HookContext.agent_id: a subagent child's label, empty for ordinary sessions.
        self.agent_id = ""

    @property
    def _scope(self) -> HookScope:
        scope = self._scope_ref()
        assert scope is not None, "hooks outlived their session"
        return scope

    @property
    def session_id(self) -> str:
        return self._scope.session_id

    def wants(self, hooks: frozenset[str]) -> bool:
        if self.runner is None:
            return False
        scope = self._scope
        return self.runner.registry.has_handlers(hooks, tenant=scope.tenant, session_id=scope.session_id)

    def session_start(self, run_id: str, *, resumed_from: str) -> None:
        """session_start, on the first turn of this session in this process. `resumed_from` is the fork source
        for a fork, the session itself when it had history before, empty for a fresh session."""
        if self.session_started:
            return
        self.session_started = True
        self.started_at = time.monotonic()
        scope = self._scope
        event: JsonObject = {"sessionId": scope.session_id, "sessionKey": scope.record.identity.session_key}
        if resumed_from:
            event["resumedFrom"] = resumed_from
        self.fire("session_start", event, run_id)

    async def session_end(self, message_count: int, *, wait: bool) -> None:
        """session_end: the session object ends (eviction, shutdown) or the session is deleted."""
        self.session_started = False
        scope = self._scope
        event: JsonObject = {
            "sessionId": scope.session_id,
            "sessionKey": scope.record.identity.session_key,
            "messageCount": message_count,
            "durationMs": int((time.monotonic() - self.started_at) * 1000),
        }
        if wait:
            await self.fire_and_wait("session_end", event)
        else:
            self.fire("session_end", event, "")

    def begin_run(self) -> None:
        self._dispatch_seq = 0

    def context(self, run_id: str, **extra: Any) -> JsonObject:
        """HookContext as hook.proto shapes it for agent and tool hooks; `dispatchSeq` orders dispatches within a run
        and is 0 outside one (session_end, before_reset), as hook.proto documents. In-process handlers also get the
        session's `tenant` (HookContext has no such field, so a remote host never sees it)."""
        scope = self._scope
        if run_id:
            self._dispatch_seq += 1
        identity = scope.record.identity
        return {
            "sessionId": scope.session_id,
            "sessionKey": identity.session_key,
            "agentId": self.agent_id,
            "runId": run_id,
            "workspaceDir": str(self._workspace),
            "dispatchSeq": self._dispatch_seq if run_id else 0,
            "tenant": scope.tenant,
            **extra,
        }

    async def run(
        self, hook: str, event: JsonObject, run_id: str, *, budget: float | None = None, **extra: Any
    ) -> HookOutcome | None:
        """Awaits a modifying (or write-path) hook; None when nobody handles it."""
        if self.runner is None or not self.wants(frozenset({hook})):
            return None
        scope = self._scope
        return await self.runner.run(
            hook,
            event,
            self.context(run_id, **extra),
            tenant=scope.tenant,
            session_id=scope.session_id,
            budget_seconds=budget,
        )

    def fire(self, hook: str, event: JsonObject, run_id: str, **extra: Any) -> None:
        """Dispatches a void hook in pipeline order and does not wait for it: observers never stall a turn."""
        if self.runner is None or not self.wants(frozenset({hook})):
            return
        scope = self._scope
        self.runner.fire(hook, event, self.context(run_id, **extra), tenant=scope.tenant, session_id=scope.session_id)

    async def fire_and_wait(self, hook: str, event: JsonObject, run_id: str = "", **extra: Any) -> None:
        """A void hook awaited within its handlers' timeouts (before_reset, session_end at shutdown)."""
        if self.runner is None or not self.wants(frozenset({hook})):
            return
        try:
            await self.run(hook, event, run_id, **extra)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("hook %s failed", hook, extra={"category": "system"})

    def traced(self, tool_name: str, execution: Coroutine[Any, Any, ToolOutcome]) -> Coroutine[Any, Any, ToolOutcome]:
        """A local tool call under its tracing span (observability/port.py), so an MCP server it calls gets the
        span's trace context; the call itself, untouched, when tracing is off."""
        spans = self.runner.spans if self.runner is not None else None
        return execution if spans is None else _under_span(spans, tool_name, execution)

    def after_tool_call(
        self,
        run_id: str,
        tool_name: str,
        call_id: str,
        params_json: str,
        result: CallResult,
        duration_ms: int = 0,
        *,
        spanned: bool = False,
    ) -> None:
        """Fired after every tool outcome (blocked, unknown and hosted ones included), before its
        tool_result/tool_error is emitted; `spanned`: a local call that ran under `traced`."""
        if self.runner is not None and self.runner.observer is not None:
            self.runner.observer.tool_call(tool_name, duration_ms / 1000, result.is_error, spanned=spanned)
        if not self.wants(frozenset({"after_tool_call"})):
            return
        details: Any = {}
        if result.details_json:
            try:
                details = json.loads(result.details_json)
            except ValueError:
                details = {"text": result.details_json}
        error = ""
        if result.is_error:
            error = next((p.text for p in result.content if isinstance(p, TextPart) and p.text), "Tool failed")
        event: JsonObject = {
            "toolName": tool_name,
            "params": json.loads(params_json) if params_json else {},
            "paramsJson": params_json,
            "runId": run_id,
            "toolCallId": call_id,
            "result": details if isinstance(details, dict) else {"value": details},
            "durationMs": duration_ms,
        }
        if error:
            event["error"] = error
        self.fire("after_tool_call", event, run_id, toolName=tool_name, toolCallId=call_id)

    # ------------------------------------------------------------------ write path
    async def filter_transcript(self, entries: list[TranscriptEntry]) -> list[TranscriptEntry]:
        if not entries or not self.wants(WRITE_PATH_HOOKS):
            return entries
        kept: list[TranscriptEntry] = []
        for entry in entries:
            filtered = await self._filter(entry)
            if filtered is not None:
                kept.append(filtered)
        return kept

    async def _filter(self, entry: TranscriptEntry) -> TranscriptEntry | None:
        """Chains the write-path hooks over one entry; None skips the write."""
        scope = self._scope
        current = entry
        if isinstance(entry.body, ToolResultEntry):
            tool: dict[str, Any] = {"toolName": entry.body.tool_name, "toolCallId": entry.body.call_id}
            event = {**tool, "message": hook_message(current)}
            persisted = await self.run("tool_result_persist", event, entry.run_id, **tool)
            if persisted is not None and persisted.result is not None:
                if persisted.result.get("block") is True:
                    return None  # a fail-closed write-path failure skips the write
                current = self._accepted(current, persisted.result.get("message"), "tool_result_persist")
        written = await self.run(
            "before_message_write",
            {"message": hook_message(current), "sessionKey": scope.record.identity.session_key},
            entry.run_id,
        )
        if written is not None and written.result is not None:
            if written.result.get("block") is True:
                return None
            current = self._accepted(current, written.result.get("message"), "before_message_write")
        return current

    @staticmethod
    def _accepted(current: TranscriptEntry, proposed: Any, hook: str) -> TranscriptEntry:
        if proposed is None:
            return current
        try:
            return entry_from_hook_message(current, proposed)
        except EntryShapeError as exc:
            logger.warning("hook %s returned an unusable transcript entry (%s); kept the original", hook, exc)
            return current


async def _under_span(spans: Spans, tool_name: str, execution: Coroutine[Any, Any, ToolOutcome]) -> ToolOutcome:
    with spans.tool(tool_name) as span:
        outcome = await execution
        if outcome.is_error:
            span.failed()
        return outcome
