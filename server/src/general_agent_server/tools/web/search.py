"""`web_search`: Brave when a key is configured, DuckDuckGo's HTML endpoint otherwise (docs/tools.md). The
tool's description and schema are the selected provider's; results are cached per query and options."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Protocol

from general_agent_server.config import ServerSettings
from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from general_agent_server.tools.web.brave import BraveProvider
from general_agent_server.tools.web.cache import TtlCache
from general_agent_server.tools.web.duckduckgo import DuckDuckGoProvider

DEFAULT_COUNT = 5
MAX_COUNT = 10
# Above both providers' own request timeouts, so theirs fire first with a clearer message.
TOOL_TIMEOUT_SECONDS = 40.0


class SearchProvider(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> Mapping[str, Any]: ...

    async def search(self, query: str, count: int, arguments: Mapping[str, Any]) -> list[dict[str, Any]]: ...


def clamp_count(raw: Any) -> int:
    """Out-of-range counts are clamped, not rejected: a model asking for 20 results still gets 10."""
    return max(1, min(MAX_COUNT, int(raw if raw is not None else DEFAULT_COUNT)))


class WebSearchTool:
    def __init__(self, provider: SearchProvider, cache_ttl_seconds: float) -> None:
        self._provider = provider
        self._cache = TtlCache(cache_ttl_seconds)
        self.spec = ToolSpec(
            name="web_search",
            description=provider.description,
            input_schema=provider.input_schema,
            read_only=True,
            timeout_seconds=TOOL_TIMEOUT_SECONDS,
        )

    @staticmethod
    def from_settings(settings: ServerSettings) -> WebSearchTool:
        provider: SearchProvider
        if settings.brave_api_key:
            provider = BraveProvider(settings.web_search_brave_url, settings.brave_api_key)
        else:
            provider = DuckDuckGoProvider(settings.web_search_duckduckgo_url, settings.web_fetch_user_agent)
        return WebSearchTool(provider, settings.web_search_cache_ttl_minutes * 60)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        query = str(arguments.get("query") or "").strip()
        if not query:
            raise ToolFailure("query is required.")
        count = clamp_count(arguments.get("count"))
        options = {k: v for k, v in arguments.items() if k not in ("query", "count")}
        key = json.dumps([self._provider.name, query, count, options], sort_keys=True)
        cached = self._cache.get(key)
        if cached is not None:
            cached["cached"] = True
            return ToolOutcome.text(json.dumps(cached, indent=2, ensure_ascii=False), cached)
        started = time.perf_counter()
        results = await self._provider.search(query, count, options)
        payload: dict[str, Any] = {
            "query": query,
            "provider": self._provider.name,
            "count": len(results),
            "tookMs": round((time.perf_counter() - started) * 1000),
            "externalContent": {
                "untrusted": True,
                "source": "web_search",
                "provider": self._provider.name,
                "wrapped": True,
            },
            "results": results,
        }
        self._cache.put(key, payload)
        return ToolOutcome.text(json.dumps(payload, indent=2, ensure_ascii=False), payload)
