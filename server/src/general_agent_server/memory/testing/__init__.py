"""The MemoryBackend conformance suite, shipped with the package so any backend can prove itself.

Requirements: pytest and pytest-asyncio (`pip install 'general-agent-server[testing]'`). Subclass
`MemoryBackendConformance` in a `test_*.py` module and implement `make_backend`, which returns a new backend
(the suite closes it after each test):

    class TestMyBackend(MemoryBackendConformance):
        async def make_backend(self, directory: Path) -> MemoryBackend:
            return MyBackend(directory / "memory.db")

Each test works in a tenant of its own (a random name). `MemoryBackendConformance` is every test; a backend
whose store is shared by every owner of one credential (the EverMe gateway binds memories to its token, and
leaves de-duplication to the outbox) subclasses `MemoryBackendCore` alone, without `OwnerIsolation`,
`ConversationFilters` and `IdempotentWrites`.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from general_agent_server.memory.convert import convert_run
from general_agent_server.memory.port import MemoryBackend
from general_agent_server.memory.types import MemoryMessage, Scope

HOSTILE_QUERIES = ('"', 'say "hi', "NEAR(", "NEAR(a b", "-", "-x", "*", "a*", "foo:bar", ")(", "AND OR NOT", "^", "")


def conversation(user: str, answer: str, *, conversation_id: str, run_id: str = "run") -> list[MemoryMessage]:
    """One completed turn, converted as capture converts it."""
    raw = [
        {"role": "user", "content": [{"type": "text", "text": user}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]
    return convert_run(raw, conversation_id=conversation_id, run_id=run_id, first_index=0, now_ms=1, success=True)


@pytest.mark.asyncio
class MemoryBackendBase:
    async def make_backend(self, directory: Path) -> MemoryBackend:
        raise NotImplementedError

    @pytest_asyncio.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[MemoryBackend]:
        made = await self.make_backend(tmp_path)
        try:
            yield made
        finally:
            await made.aclose()

    @pytest.fixture
    def scope(self) -> Scope:
        return Scope(f"tenant-{secrets.token_hex(4)}", "alice", "helper", "conversation-1")

    async def _remember(self, backend: MemoryBackend, scope: Scope, user: str, answer: str) -> None:
        messages = conversation(user, answer, conversation_id=scope.conversation_id)
        await backend.write(scope, messages, flush=True, turns=1)


class MemoryBackendCore(MemoryBackendBase):
    """What every backend does: recall across conversations, CJK text, hostile queries, get, top-k."""

    async def test_is_a_memory_backend(self, backend: MemoryBackend) -> None:
        assert isinstance(backend, MemoryBackend)
        assert backend.name

    async def test_recalls_across_conversations_of_one_owner(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, "My favourite colour is teal", "Noted: teal.")
        later = Scope(scope.tenant, scope.user_id, scope.agent_id, "conversation-2")
        hits = await backend.search(later, "which colour is my favourite", top_k=5)
        assert any("teal" in hit.text for hit in hits)

    async def test_recalls_cjk_text(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, "我最喜欢的水果是芒果", "好的，记住了。")
        later = Scope(scope.tenant, scope.user_id, scope.agent_id, "conversation-2")
        hits = await backend.search(later, "我喜欢什么水果", top_k=5)
        assert any("芒果" in hit.text for hit in hits)

    async def test_hostile_queries_are_plain_text(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, 'He said "NEAR(" and -x * foo:bar', "Odd text.")
        for query in HOSTILE_QUERIES:
            hits = await backend.search(scope, query, top_k=5)
            assert isinstance(hits, list)

    async def test_get_answers_what_search_returned(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, "The staging host is kestrel", "Kestrel, noted.")
        hits = await backend.search(scope, "staging host", top_k=5)
        assert hits
        got = await backend.get(scope, hits[0].id)
        assert got is not None
        assert "kestrel" in (got.detail or got.text)
        assert await backend.get(scope, "no-such-id") is None

    async def test_top_k_bounds_the_answer(self, backend: MemoryBackend, scope: Scope) -> None:
        for index in range(4):
            await self._remember(backend, scope, f"Fact number {index} about penguins", f"Penguin fact {index}.")
        assert len(await backend.search(scope, "penguins fact", top_k=2)) <= 2


class OwnerIsolation(MemoryBackendBase):
    """One owner (tenant, user, agent) never reaches another's memories."""

    async def test_never_recalls_another_owners_memories(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, "My locker code is 4711 blue", "Noted.")
        others = (
            Scope(f"{scope.tenant}-other", scope.user_id, scope.agent_id, "c"),
            Scope(scope.tenant, "bob", scope.agent_id, "c"),
            Scope(scope.tenant, scope.user_id, "other-agent", "c"),
        )
        for other in others:
            assert await backend.search(other, "locker code blue", top_k=5) == []

    async def test_get_refuses_another_owners_id(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, "The staging host is kestrel", "Kestrel, noted.")
        hits = await backend.search(scope, "staging host", top_k=5)
        assert hits
        assert await backend.get(Scope(scope.tenant, "mallory", scope.agent_id, "c"), hits[0].id) is None


class IdempotentWrites(MemoryBackendBase):
    """A write repeated (after a crash, say) stores nothing twice."""

    async def test_writing_twice_stores_once(self, backend: MemoryBackend, scope: Scope) -> None:
        messages = conversation("The deploy window is Tuesday", "Noted.", conversation_id="c1")
        await backend.write(scope, messages, flush=False, turns=1)
        await backend.write(scope, messages, flush=False, turns=1)
        hits = await backend.search(scope, "deploy window Tuesday", top_k=10)
        assert len([h for h in hits if "Tuesday" in h.text]) == 1


class ConversationFilters(MemoryBackendBase):
    """Searches limited to, or excluding, one conversation."""

    async def test_conversation_filters(self, backend: MemoryBackend, scope: Scope) -> None:
        await self._remember(backend, scope, "The build uses gradle", "Gradle.")
        other = Scope(scope.tenant, scope.user_id, scope.agent_id, "conversation-2")
        assert await backend.search(other, "build gradle", top_k=5, conversation_only=True) == []
        assert await backend.search(other, "build gradle", top_k=5, exclude_conversation=scope.conversation_id) == []
        assert await backend.search(scope, "build gradle", top_k=5, conversation_only=True)


class MemoryBackendConformance(MemoryBackendCore, OwnerIsolation, IdempotentWrites, ConversationFilters):
    """Every test a backend that keeps memories per owner must pass."""


__all__ = [
    "HOSTILE_QUERIES",
    "ConversationFilters",
    "IdempotentWrites",
    "MemoryBackendConformance",
    "MemoryBackendCore",
    "OwnerIsolation",
    "conversation",
]
