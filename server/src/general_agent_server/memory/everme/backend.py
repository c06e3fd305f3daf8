"""The EverMe backend (docs/memory.md, "The EverMe backend"): the MemoryBackend port over the gateway's
`POST /mem/search`, `/mem/context` and `/mem/agent-memory`.

The gateway binds the agent to the token, so nothing of the scope but the conversation id goes on the wire;
memory.service only gives this backend the sessions of the owner the token belongs to. Hits are answered
with ids `memory_get` resolves from a small cache of recent searches, as the gateway has no get-by-id."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from general_agent_server.memory.everme.batching import flags, split
from general_agent_server.memory.everme.client import EverMeClient
from general_agent_server.memory.everme.config import EverMeConfig
from general_agent_server.memory.types import (
    FailureKind,
    HitKind,
    MemoryFailure,
    MemoryHit,
    MemoryMessage,
    Scope,
    WriteResult,
)

MAX_QUERY_CHARS = 1024
CACHE_SIZE = 200


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _score(item: Mapping[str, Any]) -> float | None:
    for key in ("score", "relevanceScore"):
        value = item.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _hit(kind: HitKind, item: Mapping[str, Any], text: str, detail: str = "") -> MemoryHit | None:
    if not text:
        return None
    native = item.get("id")
    ident = str(native) if isinstance(native, str | int) and str(native) else ""
    ident = ident or hashlib.sha256(f"{kind.value}\x1f{text}".encode()).hexdigest()[:16]
    return MemoryHit(id=f"everme:{kind.value}:{ident}", kind=kind, text=text, score=_score(item), detail=detail or text)


def hits_from_result(result: Any) -> list[MemoryHit]:
    """The search result's episodes, profiles, raw messages, cases and skills as hits (unknown shapes skipped)."""
    if not isinstance(result, Mapping):
        return []
    hits: list[MemoryHit | None] = []
    for item in _items(result.get("items")):
        text = _text(item.get("episode")) or _text(item.get("summary")) or _text(item.get("content"))
        text = text or _text(item.get("text"))
        facts = [f for f in item.get("atomicFacts", ()) if isinstance(f, str)] if "atomicFacts" in item else []
        hits.append(_hit(HitKind.EPISODE, item, text, "\n".join([text, *facts])))
    for item in _items(result.get("profiles")):
        data = item.get("profileData")
        embed = _text(data.get("embed_text")) if isinstance(data, Mapping) else ""
        hits.append(_hit(HitKind.PROFILE, item, embed or _text(item.get("summary"))))
    for item in _items(result.get("rawMessages")):
        parts = [_text(p.get("text")) for p in _items(item.get("contentItems"))]
        text = " ".join(p for p in parts if p)
        sender = _text(item.get("senderName"))
        hits.append(_hit(HitKind.RAW, item, f"{sender}: {text}" if sender and text else text))
    agent = result.get("agentMemory")
    if isinstance(agent, Mapping):
        for item in _items(agent.get("cases")):
            intent, approach = _text(item.get("taskIntent")), _text(item.get("approach"))
            hits.append(_hit(HitKind.CASE, item, " — ".join(p for p in (intent, approach) if p)))
        for item in _items(agent.get("skills")):
            head = " — ".join(p for p in (_text(item.get("name")), _text(item.get("description"))) if p)
            hits.append(_hit(HitKind.SKILL, item, head, "\n".join(p for p in (head, _text(item.get("content"))) if p)))
    return [h for h in hits if h is not None]


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def profile_text(result: Any) -> str | None:
    """The `/mem/context` profile as lines of facts and traits, or None when it has none."""
    if not isinstance(result, Mapping):
        return None
    if isinstance(result.get("context"), str) and result["context"].strip():
        return str(result["context"]).strip()
    profile = result.get("profile")
    if not isinstance(profile, Mapping):
        return None
    lines = [_text(f.get("description")) for f in _items(profile.get("explicit_info"))[:12]]
    lines += [
        f"{_text(t.get('trait'))}: {_text(t.get('description'))}".strip(": ")
        for t in _items(profile.get("implicit_traits"))[:6]
    ]
    kept = [line for line in lines if line]
    return "; ".join(kept) if kept else None


class EverMeBackend:
    def __init__(self, config: EverMeConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self.client = EverMeClient(config, transport=transport)
        self._seen: OrderedDict[tuple[tuple[str, str, str], str], MemoryHit] = OrderedDict()

    @property
    def name(self) -> str:
        return "everme"

    async def search(
        self, scope: Scope, query: str, *, top_k: int, conversation_only: bool = False, exclude_conversation: str = ""
    ) -> list[MemoryHit]:
        # The gateway searches the token's agent as a whole: the conversation filters have nothing to act on.
        body = {"query": query[:MAX_QUERY_CHARS], "topK": min(max(top_k, 1), 50)}
        reply = await self.client.call("POST", "/mem/search", body)
        hits = hits_from_result(reply.result)
        for hit in hits:
            self._remember(scope, hit)
        return hits[:top_k]

    def _remember(self, scope: Scope, hit: MemoryHit) -> None:
        key = (scope.owner, hit.id)
        self._seen[key] = hit
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_SIZE:
            self._seen.popitem(last=False)

    async def get(self, scope: Scope, hit_id: str) -> MemoryHit | None:
        return self._seen.get((scope.owner, hit_id))

    async def write(
        self, scope: Scope, messages: Sequence[MemoryMessage], *, flush: bool, turns: int, start_batch: int = 0
    ) -> WriteResult:
        if not self.config.can_write:
            raise MemoryFailure(FailureKind.CONFIG, "writes need an agent token (evt_) and EVERME_AGENT_ID")
        ranges = split(messages)
        marks = flags(len(ranges), flush=flush, sync=False, turns=turns)
        request_ids: list[str] = []
        result: Any = None
        for index in range(start_batch, len(ranges)):
            start, end = ranges[index]
            mark = marks[index]
            body: dict[str, Any] = {
                "conversationId": scope.conversation_id,
                "messages": [m.wire() for m in messages[start:end]],
                "flush": mark.flush,
                "channel": "hook",
                "turns": mark.turns,
            }
            if mark.sync:
                body["sync"] = True
            try:
                reply = await self.client.call("POST", "/mem/agent-memory", body)
            except MemoryFailure as failure:
                failure.sent_batches = index
                raise
            request_ids.append(reply.request_id)
            result = reply.result
        answer = result if isinstance(result, Mapping) else {}
        return WriteResult(
            status=str(answer.get("status", "accepted")),
            message_count=int(answer.get("messageCount", len(messages)) or 0),
            flushed=bool(answer.get("flushed", flush)),
            request_ids=tuple(request_ids),
        )

    async def context(self, scope: Scope) -> str | None:
        reply = await self.client.call("POST", "/mem/context", {})
        return profile_text(reply.result)

    async def aclose(self) -> None:
        await self.client.aclose()
