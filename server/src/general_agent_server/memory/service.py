"""The memory service (docs/memory.md): who has memory, recall before a run, capture after it, the tools' searches,
and the hook handlers through which runs reach it. It owns the policy; the backends stay mechanical.

Memory never fails or stalls a turn: recall runs under one deadline (`memory_recall_timeout`) and answers
nothing on any failure; capture only converts, redacts and queues (the outbox sends later); every failure is
logged scrubbed and goes no further."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from general_agent_server.domain.session import SessionRecord
from general_agent_server.hooks.payloads import IncludeMessages, MessageSelection
from general_agent_server.hooks.registry import FailurePolicy, HookHandler, JsonObject
from general_agent_server.memory.convert import convert_run, shape
from general_agent_server.memory.outbox import Outbox
from general_agent_server.memory.port import MemoryBackend
from general_agent_server.memory.query import recall_query, worth_recalling
from general_agent_server.memory.render import render, select
from general_agent_server.memory.settings import MemorySettings
from general_agent_server.memory.types import MemoryFailure, MemoryHit, MemoryMessage, Scope

logger = logging.getLogger(__name__)
PLUGIN_ID = "builtin:memory"
# Memory's handlers see whole runs: capture must not lose the oldest messages of a long one.
_ALL_MESSAGES = MessageSelection(include=IncludeMessages.ALL, max_payload_bytes=256 * 1024 * 1024)

Records = Callable[[str, str], SessionRecord | None]


class MemoryService:
    def __init__(self, settings: MemorySettings, backend: MemoryBackend, outbox: Outbox) -> None:
        self.settings = settings
        self.backend = backend
        self.outbox = outbox
        self._records: Records = lambda tenant, session_id: None
        self._refused: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ who has memory
    def attach(self, records: Records) -> None:
        """How the service finds a loaded session's record (the session cache)."""
        self._records = records

    def scope_for(self, record: SessionRecord) -> Scope | None:
        """The session's memory scope, or None when it has no memory. A session without a user id keeps its
        memories to itself (its own conversation); the EverMe backend serves only the token owner's sessions."""
        memory = record.config.memory
        enabled = memory.enabled if memory.enabled is not None else self.settings.default_enabled
        if not enabled or record.parent_session_id:
            # A subagent child has none: its parent's run captures what the child answered, as a tool result.
            return None
        user = memory.user_id or f"session:{record.session_id}"
        scope = Scope(record.tenant, user, memory.agent_id, record.session_id)
        if self.backend.name == "everme" and not self._token_owner(scope):
            return None
        return scope

    def _token_owner(self, scope: Scope) -> bool:
        owner = scope.tenant == self.settings.everme_tenant and scope.user_id == self.settings.everme_user_id
        if not owner and (scope.tenant, scope.conversation_id) not in self._refused:
            self._refused.add((scope.tenant, scope.conversation_id))
            logger.warning(
                "memory off for session %s: the EverMe backend serves only tenant %s, user %s",
                scope.conversation_id,
                self.settings.everme_tenant,
                self.settings.everme_user_id,
                extra={"category": "system"},
            )
        return owner

    def _scope_of(self, tenant: str, session_id: str) -> Scope | None:
        record = self._records(tenant, session_id)
        return self.scope_for(record) if record is not None else None

    def serves(self, tenant: str, session_id: str) -> bool:
        return self._scope_of(tenant, session_id) is not None

    def limits(self, record: SessionRecord) -> tuple[int, int]:
        """The session's recall top-k and budget (0 in the session means the server's)."""
        memory = record.config.memory
        return (
            memory.recall_top_k or self.settings.recall_top_k,
            memory.recall_budget_chars or self.settings.recall_budget_chars,
        )

    # ------------------------------------------------------------------ recall
    async def recall(self, scope: Scope, prompt: str, *, top_k: int, budget_chars: int, first_turn: bool) -> str:
        """The recall block for `prompt` ("" when there is nothing, the prompt is trivial, or recall failed or
        ran out of time). Memories of the current conversation are left out: they are in its history."""
        query = recall_query(prompt)
        if not worth_recalling(prompt, query):
            return ""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.recall_timeout):
                search = self.backend.search(scope, query, top_k=top_k * 2, exclude_conversation=scope.conversation_id)
                if first_turn:
                    hits, profile = await asyncio.gather(search, self._profile(scope))
                else:
                    hits, profile = await search, None
        except TimeoutError:
            logger.warning(
                "memory recall skipped: over %gs", self.settings.recall_timeout, extra={"category": "system"}
            )
            return ""
        except MemoryFailure as failure:
            logger.warning("memory recall failed: %s", failure.describe(), extra={"category": "system"})
            return ""
        except Exception:
            logger.exception("memory recall failed", extra={"category": "system"})
            return ""
        chosen = select(hits, top_k=top_k)
        logger.debug(
            "memory recall: %d of %d hit(s) in %.1fms",
            len(chosen),
            len(hits),
            (time.perf_counter() - started) * 1000,
            extra={"category": "system"},
        )
        return render(chosen, budget_chars=budget_chars, profile=profile or "")

    async def _profile(self, scope: Scope) -> str | None:
        try:
            return await self.backend.context(scope)
        except MemoryFailure as failure:
            logger.warning("memory profile failed: %s", failure.describe(), extra={"category": "system"})
            return None

    # ------------------------------------------------------------------ capture
    async def capture(
        self, scope: Scope, run_id: str, messages: Sequence[Mapping[str, Any]], *, total: int, success: bool
    ) -> int:
        """Queues the run's messages not captured before. `messages` are the run's last ones, `total` how many
        the run has (a hook payload may have dropped the oldest)."""
        offset = total - len(messages)
        now_ms = int(time.time() * 1000)

        shapes: list[str] = []

        def convert(done: int) -> list[MemoryMessage]:
            first = max(done - offset, 0)
            converted = convert_run(
                messages, conversation_id=scope.conversation_id, run_id=run_id, first_index=first, now_ms=now_ms,
                success=success,
            )  # fmt: skip
            shapes.append(shape(converted))
            return converted

        queued = await self.outbox.enqueue(scope, run_id, total, convert, completed=success)
        if queued:
            # The shape (counts per role and tool calls) shows a capture that lost its tool round trips.
            logger.info("memory captured %s", shapes[-1], extra={"category": "system"})
        return queued

    # ------------------------------------------------------------------ the tools
    async def search(self, scope: Scope, query: str, *, top_k: int, conversation_only: bool) -> list[MemoryHit]:
        return await self.backend.search(scope, query, top_k=top_k, conversation_only=conversation_only)

    async def get(self, scope: Scope, hit_id: str) -> MemoryHit | None:
        return await self.backend.get(scope, hit_id)

    # ------------------------------------------------------------------ hooks
    def handlers(self) -> list[HookHandler]:
        """before_prompt_build (recall) and agent_end (capture), for the sessions with memory only."""
        common: dict[str, Any] = {
            "plugin_id": PLUGIN_ID,
            "failure_policy": FailurePolicy.FAIL_OPEN,
            "messages": _ALL_MESSAGES,
            "serves": self.serves,
        }
        return [
            HookHandler(
                hook="before_prompt_build",
                call=self._before_prompt_build,
                timeout_seconds=self.settings.recall_timeout + 1.0,
                **common,
            ),
            HookHandler(hook="agent_end", call=self._agent_end, **common),
        ]

    async def _before_prompt_build(self, event: JsonObject, context: JsonObject) -> JsonObject | None:
        record = self._records(str(context.get("tenant", "")), str(context.get("sessionId", "")))
        scope = self.scope_for(record) if record is not None else None
        if record is None or scope is None:
            return None
        top_k, budget = self.limits(record)
        history = event.get("messages")
        first = not (history.get("messageCount") if isinstance(history, dict) else 0)
        block = await self.recall(
            scope, str(event.get("prompt", "")), top_k=top_k, budget_chars=budget, first_turn=first
        )
        return {"prependContext": block} if block else None

    async def _agent_end(self, event: JsonObject, context: JsonObject) -> JsonObject | None:
        scope = self._scope_of(str(context.get("tenant", "")), str(context.get("sessionId", "")))
        history = event.get("messages")
        if scope is None or not isinstance(history, dict):
            return None
        messages = [m for m in history.get("messages", ()) if isinstance(m, dict)]
        try:
            await self.capture(
                scope,
                str(context.get("runId", "")),
                messages,
                total=int(history.get("messageCount", len(messages))),
                success=event.get("success") is True,
            )
        except Exception:
            logger.exception("memory capture failed", extra={"category": "system"})
        return None

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        await self.outbox.start()

    async def aclose(self) -> None:
        """Sends what is due within the drain deadline; the rest stays in the outbox for the next start."""
        await self.outbox.drain(self.settings.drain_timeout)
        await self.outbox.aclose()
        await self.backend.aclose()
