"""The in-process MemoryBackend fake: memories in a list, searched by shared words (CJK by substring), scoped and
idempotent like the local backend. `fail_with` makes the next calls raise, `stall` makes searches hang until
`release`, and `writes` records what was written, for tests of the service and the outbox."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from general_agent_server.memory.query import cjk_runs
from general_agent_server.memory.types import HitKind, MemoryFailure, MemoryHit, MemoryMessage, Scope, WriteResult

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


class InMemoryBackend:
    def __init__(self) -> None:
        self._rows: list[tuple[Scope, MemoryMessage]] = []
        self.writes: list[tuple[Scope, tuple[MemoryMessage, ...], bool, int, int]] = []
        self.failures: list[MemoryFailure] = []
        self.stalled = False
        self._release = asyncio.Event()

    @property
    def name(self) -> str:
        return "memory"

    def fail_with(self, *failures: MemoryFailure) -> None:
        self.failures.extend(failures)

    def stall(self) -> None:
        self.stalled = True
        self._release.clear()

    def release(self) -> None:
        self.stalled = False
        self._release.set()

    def _raise_if_failing(self) -> None:
        if self.failures:
            raise self.failures.pop(0)

    async def search(
        self, scope: Scope, query: str, *, top_k: int, conversation_only: bool = False, exclude_conversation: str = ""
    ) -> list[MemoryHit]:
        if self.stalled:
            await self._release.wait()
        self._raise_if_failing()
        words = _words(query)
        runs = [r for r in cjk_runs(query) if len(r) >= 2]
        hits: list[MemoryHit] = []
        for index, (owner, message) in enumerate(self._rows):
            if owner.owner != scope.owner or message.role == "tool":
                continue
            if conversation_only and owner.conversation_id != scope.conversation_id:
                continue
            if exclude_conversation and owner.conversation_id == exclude_conversation:
                continue
            shared = words & _words(message.content)
            cjk = any(run[i : i + 2] in message.content for run in runs for i in range(len(run) - 1))
            if shared or cjk:
                hits.append(
                    MemoryHit(
                        id=f"memory:{index}",
                        kind=HitKind.TURN,
                        text=message.content,
                        score=min(0.99, 0.2 + 0.1 * len(shared)),
                        conversation_id=owner.conversation_id,
                        detail=message.content,
                    )
                )
        hits.sort(key=lambda h: -(h.score or 0))
        return hits[:top_k]

    async def get(self, scope: Scope, hit_id: str) -> MemoryHit | None:
        prefix, _, number = hit_id.partition(":")
        if prefix != "memory" or not number.isdigit() or int(number) >= len(self._rows):
            return None
        owner, message = self._rows[int(number)]
        if owner.owner != scope.owner:
            return None
        return MemoryHit(id=hit_id, kind=HitKind.TURN, text=message.content, detail=message.content)

    async def write(
        self, scope: Scope, messages: Sequence[MemoryMessage], *, flush: bool, turns: int, start_batch: int = 0
    ) -> WriteResult:
        self._raise_if_failing()
        self.writes.append((scope, tuple(messages), flush, turns, start_batch))
        known = {(s.owner, s.conversation_id, m.native_id) for s, m in self._rows}
        stored = 0
        for message in messages:
            if (scope.owner, scope.conversation_id, message.native_id) not in known:
                self._rows.append((scope, message))
                stored += 1
        return WriteResult(status="stored", message_count=stored, flushed=flush)

    async def context(self, scope: Scope) -> str | None:
        return None

    async def aclose(self) -> None:
        self.release()
