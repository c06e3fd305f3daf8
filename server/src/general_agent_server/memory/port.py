"""The MemoryBackend port (docs/memory.md, "Backends"): what recall, capture and the memory tools need from a
store of memories. Two adapters: `memory.local.LocalMemoryBackend` (SQLite FTS5, the default) and
`memory.everme.backend.EverMeBackend` (the EverMe gateway); the in-process fake is
`memory.testing.fake.InMemoryBackend`, and `memory.testing` ships the conformance suite every adapter passes.

Backends are mechanical: the policy (deadlines, skipping, filtering, budgets, the outbox and its retries,
redaction before anything is stored) belongs to `memory.service.MemoryService`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from general_agent_server.memory.types import MemoryHit, MemoryMessage, Scope, WriteResult


@runtime_checkable
class MemoryBackend(Protocol):
    @property
    def name(self) -> str: ...

    async def search(
        self, scope: Scope, query: str, *, top_k: int, conversation_only: bool = False, exclude_conversation: str = ""
    ) -> list[MemoryHit]:
        """The best `top_k` memories of the scope's owner for `query`, best first. `query` is plain text:
        nothing in it is syntax. `conversation_only` keeps the scope's conversation's memories only,
        `exclude_conversation` drops one conversation's. Raises MemoryFailure."""
        ...

    async def get(self, scope: Scope, hit_id: str) -> MemoryHit | None:
        """The whole memory an earlier search returned, or None for an id unknown to this owner."""
        ...

    async def write(
        self, scope: Scope, messages: Sequence[MemoryMessage], *, flush: bool, turns: int, start_batch: int = 0
    ) -> WriteResult:
        """Stores the messages of one captured run in the scope's conversation, idempotently (a message with a
        `native_id` already stored is not stored again). `start_batch` skips the batches of a split upload an
        earlier attempt had delivered. Raises MemoryFailure (with `sent_batches` when some were delivered)."""
        ...

    async def context(self, scope: Scope) -> str | None:
        """A profile of the owner to recall at the start of a conversation, if the backend keeps one."""
        ...

    async def aclose(self) -> None: ...
