"""The `memory_search` and `memory_get` tools (docs/tools.md, docs/memory.md), offered to sessions with memory.

Identity comes from the session, never from the arguments: a call can only reach its own owner's memories.
Both answer plain text for the model and `details` for hosts; a backend failure is the tool's error, an id
that is not known is a normal answer ("No memory with that id")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from general_agent_server.domain.session import SessionRecord
from general_agent_server.memory.render import one_line
from general_agent_server.memory.service import MemoryService
from general_agent_server.memory.types import MemoryFailure, Scope
from general_agent_server.security.redaction import scrub
from general_agent_server.tools.runtime import LocalTool, ToolContext, ToolFailure, ToolOutcome, ToolSpec

TOOL_TIMEOUT = 10.0
MAX_GET_CHARS = 16_000

SEARCH_SPEC = ToolSpec(
    name="memory_search",
    description=(
        "Search the memories of earlier conversations with this user (what they said, decided and prefer). "
        "Use one short, focused query. Answers numbered memories with ids for memory_get."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "What to look for."},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many (default 5)."},
            "scope": {
                "type": "string",
                "enum": ["all", "conversation"],
                "description": "all (default) or only this conversation.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    timeout_seconds=TOOL_TIMEOUT,
)
GET_SPEC = ToolSpec(
    name="memory_get",
    description="The whole of one memory memory_search returned, by its id.",
    input_schema={
        "type": "object",
        "properties": {
            "id": {"type": "string", "minLength": 1, "maxLength": 512, "description": "An id from memory_search."},
            "max_chars": {"type": "integer", "minimum": 100, "maximum": MAX_GET_CHARS, "description": "Default 4000."},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    timeout_seconds=TOOL_TIMEOUT,
)


def _failed(what: str, failure: MemoryFailure) -> ToolFailure:
    request = f" (requestId={failure.request_id})" if failure.request_id else ""
    return ToolFailure(f"Memory {what} failed: {failure.kind.value}: {failure.message}{request}")


class MemorySearchTool:
    def __init__(self, service: MemoryService, scope: Scope) -> None:
        self._service = service
        self._scope = scope

    @property
    def spec(self) -> ToolSpec:
        return SEARCH_SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        query = str(arguments.get("query", "")).strip()
        if not query:
            raise ToolFailure("Missing required parameter: query")
        top_k = int(arguments.get("top_k", 5))
        try:
            hits = await self._service.search(
                self._scope, query, top_k=top_k, conversation_only=arguments.get("scope") == "conversation"
            )
        except MemoryFailure as failure:
            raise _failed("search", failure) from None
        details = {"count": len(hits), "backend": self._service.backend.name, "ids": [h.id for h in hits]}
        if not hits:
            return ToolOutcome.text("No relevant memories found.", details)
        lines = []
        for number, hit in enumerate(hits, start=1):
            score = f", score {hit.score:.2f}" if hit.score is not None else ""
            lines.append(f"{number}. [{hit.id}] ({hit.kind.value}{score}) {scrub(one_line(hit.text))}")
        return ToolOutcome.text("\n".join(lines), details)


class MemoryGetTool:
    def __init__(self, service: MemoryService, scope: Scope) -> None:
        self._service = service
        self._scope = scope

    @property
    def spec(self) -> ToolSpec:
        return GET_SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        hit_id = str(arguments.get("id", "")).strip()
        limit = int(arguments.get("max_chars", 4000))
        try:
            hit = await self._service.get(self._scope, hit_id)
        except MemoryFailure as failure:
            raise _failed("get", failure) from None
        if hit is None:
            return ToolOutcome.text(
                "No memory with that id (it may have been forgotten, or have expired from this session's cache).",
                {"found": False, "id": hit_id},
            )
        text = scrub(hit.detail or hit.text)
        if len(text) > limit:
            text = text[:limit] + f"\n[… {len(text) - limit} more characters]"
        return ToolOutcome.text(text, {"found": True, "id": hit.id, "kind": hit.kind.value})


class MemoryTools:
    """The catalog's session tools: the two memory tools for a session with memory, none otherwise."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    def tools_for(self, record: SessionRecord) -> Sequence[LocalTool]:
        scope = self._service.scope_for(record)
        if scope is None:
            return ()
        return (MemorySearchTool(self._service, scope), MemoryGetTool(self._service, scope))
