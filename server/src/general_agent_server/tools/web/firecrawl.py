"""The Firecrawl scrape API as web_fetch's fallback (docs/tools.md, web_fetch): used when the origin cannot be
reached, answers non-2xx, or serves HTML where Readability finds nothing. The request goes through the same
SSRF guard and address pinning as any fetch. The API key travels only in the Authorization header; error
details are scrubbed of it, and the config's repr leaves it out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from general_agent_server.security.redaction import scrub
from general_agent_server.security.ssrf import SsrfGuard
from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.tools.web.external_content import wrap_external
from general_agent_server.tools.web.extract import markdown_to_text
from general_agent_server.tools.web.guarded_http import GuardedFetcher

DEFAULT_BASE_URL = "https://api.firecrawl.dev"
SCRAPE_PATH = "/v2/scrape"
# The API's JSON carries the page as markdown plus metadata; 10 MB is the largest body web_fetch may ever read.
MAX_RESPONSE_BYTES = 10_000_000
MAX_ERROR_DETAIL_CHARS = 4_000


def scrape_endpoint(base_url: str) -> str:
    """A bare base (no path, or `/`) gets the scrape path; any other path is the endpoint itself."""
    url = httpx.URL(base_url.strip() or DEFAULT_BASE_URL)
    if url.path not in ("", "/"):
        return str(url)
    return str(url.copy_with(path=SCRAPE_PATH))


@dataclass(frozen=True, kw_only=True, slots=True)
class FirecrawlConfig:
    api_key: str = field(repr=False)
    base_url: str = DEFAULT_BASE_URL
    only_main_content: bool = True
    max_age_ms: int = 172_800_000
    timeout_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class FirecrawlPage:
    text: str  # markdown, or plain text in text mode
    title: str | None
    final_url: str | None
    status: int | None
    warning: str | None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class FirecrawlClient:
    def __init__(
        self, config: FirecrawlConfig, guard: SsrfGuard, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._config = config
        self._endpoint = scrape_endpoint(config.base_url)
        self._fetcher = GuardedFetcher(
            guard,
            timeout_seconds=config.timeout_seconds,
            max_redirects=0,
            transport=transport,
            failure_prefix="Firecrawl fetch failed",
        )

    @property
    def timeout_seconds(self) -> float:
        return self._config.timeout_seconds

    def _failure(self, status: int, detail: str) -> ToolFailure:
        clean = scrub(detail[:MAX_ERROR_DETAIL_CHARS], [self._config.api_key])
        wrapped = wrap_external(clean, source="web_fetch", notice=True).text
        return ToolFailure(f"Firecrawl fetch failed ({status}): {wrapped}", {"status": status})

    async def scrape(self, url: str, mode: str) -> FirecrawlPage:
        body = {
            "url": url,
            "formats": ["markdown"],
            "onlyMainContent": self._config.only_main_content,
            "timeout": round(self._config.timeout_seconds * 1000),
            "maxAge": self._config.max_age_ms,
            "proxy": "auto",
            "storeInCache": True,
        }
        response = await self._fetcher.post(
            self._endpoint,
            headers={
                "Authorization": f"Bearer {self._config.api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
            content=json.dumps(body).encode(),
            max_bytes=MAX_RESPONSE_BYTES,
        )
        try:
            payload: Any = json.loads(response.body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            if 200 <= response.status < 300:
                raise self._failure(response.status, "malformed response")
            raise self._failure(response.status, response.text() or httpx.codes.get_reason_phrase(response.status))
        if not 200 <= response.status < 300 or payload.get("success") is False:
            detail = payload.get("error")
            reason = httpx.codes.get_reason_phrase(response.status)
            raise self._failure(response.status, detail if isinstance(detail, str) and detail else reason)
        data = payload.get("data")
        data = data if isinstance(data, dict) else {}
        metadata = data.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        markdown = _str_or_none(data.get("markdown")) or _str_or_none(data.get("content")) or ""
        status = metadata.get("statusCode")
        return FirecrawlPage(
            text=markdown if mode == "markdown" else markdown_to_text(markdown),
            title=_str_or_none(metadata.get("title")),
            final_url=_str_or_none(metadata.get("url")) or _str_or_none(metadata.get("sourceURL")),
            status=status if isinstance(status, int) and not isinstance(status, bool) else None,
            warning=_str_or_none(payload.get("warning")),
        )
