"""A local web server for the web tools' tests (aiohttp on a loopback address, port 0): pages, redirects,
JSON, hanging responses, and page builders for a fake DuckDuckGo HTML endpoint, a fake Brave Search API and a
fake Firecrawl scrape API. Every request is recorded (with its body) so tests can assert what was (and was not)
fetched."""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.support.loopback_http import LoopbackHttp

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DDG_PATH = "/html"
BRAVE_PATH = "/res/v1/web/search"
FIRECRAWL_PATH = "/v2/scrape"

DDG_CHALLENGE = """<html><body><div class="anomaly-modal__title">Unfortunately, bots use DuckDuckGo too.</div>
<form id="challenge-form" action="/anomaly.js"><p>Please complete the following challenge.</p></form></body></html>"""


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str = ""


class FakeWeb(LoopbackHttp):
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.requests: list[Recorded] = []
        self._routes: dict[str, Handler] = {}
        self.port = 0

    def url(self, path: str) -> str:
        return self.base_url + path

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.path,
                query=dict(request.query),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=await request.read(),
            )
        )
        handler = self._routes.get(request.path)
        if handler is None:
            return web.Response(status=404, text="no such page")
        return await handler(request)

    def route(self, path: str, handler: Handler) -> None:
        self._routes[path] = handler

    def page(
        self,
        path: str,
        body: str | bytes,
        *,
        content_type: str = "text/html; charset=utf-8",
        status: int = 200,
    ) -> None:
        data = body.encode() if isinstance(body, str) else body

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, body=data, headers={"Content-Type": content_type})

        self.route(path, handler)

    def json(self, path: str, value: Any, *, status: int = 200) -> None:
        self.page(path, json.dumps(value), content_type="application/json", status=status)

    def redirect(self, path: str, location: str, *, status: int = 302) -> None:
        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, headers={"Location": location})

        self.route(path, handler)

    def hang(self, path: str) -> None:
        """A response that never comes (until the server stops)."""

        async def handler(request: web.Request) -> web.StreamResponse:
            await self._release.wait()
            return web.Response(text="too late")

        self.route(path, handler)

    def duckduckgo(self, hits: Sequence[SearchHit], *, ad: SearchHit | None = None) -> None:
        self.page(DDG_PATH, duckduckgo_html(hits, ad=ad))

    def brave(self, hits: Sequence[SearchHit], *, api_key: str) -> None:
        """Answers like Brave: 401 with a JSON error unless the subscription token matches."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if request.headers.get("X-Subscription-Token") != api_key:
                return web.json_response({"type": "ErrorResponse", "error": {"code": "UNAUTHORIZED"}}, status=401)
            return web.json_response(brave_json(hits))

        self.route(BRAVE_PATH, handler)

    def firecrawl(
        self,
        *,
        api_key: str,
        markdown: str = "",
        metadata: dict[str, Any] | None = None,
        warning: str | None = None,
        error_status: int | None = None,
        error: str = "",
        path: str = FIRECRAWL_PATH,
    ) -> None:
        """Answers like Firecrawl's scrape API: 401 unless the bearer token matches, then either the page as
        markdown or, with error_status, `{"success": false, "error": ...}` with that status."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if request.headers.get("Authorization") != f"Bearer {api_key}":
                return web.json_response({"success": False, "error": "Unauthorized: invalid token"}, status=401)
            if error_status is not None:
                return web.json_response({"success": False, "error": error}, status=error_status)
            body: dict[str, Any] = {
                "success": True,
                "data": {"markdown": markdown, "metadata": {"statusCode": 200, **(metadata or {})}},
            }
            if warning is not None:
                body["warning"] = warning
            return web.json_response(body)

        self.route(path, handler)


def _ddg_result(hit: SearchHit, classes: str = "result results_links web-result") -> str:
    redirect = "//duckduckgo.com/l/?uddg=" + quote(hit.url, safe="") + "&amp;rut=abc123"
    return f"""<div class="{classes}"><div class="links_main result__body">
  <h2 class="result__title"><a rel="nofollow" class="result__a" href="{redirect}">{html.escape(hit.title)}</a></h2>
  <div class="result__extras"><a class="result__url" href="{redirect}">{html.escape(hit.url)}</a></div>
  <a class="result__snippet" href="{redirect}">{html.escape(hit.snippet)}</a>
</div></div>"""


def duckduckgo_html(hits: Sequence[SearchHit], *, ad: SearchHit | None = None) -> str:
    ads = ""
    if ad is not None:
        ads = _ddg_result(ad, "result result--ad results_links").replace(
            "//duckduckgo.com/l/?uddg=", "//duckduckgo.com/y.js?ad_domain=x&amp;u3="
        )
    body = "\n".join(_ddg_result(hit) for hit in hits)
    return f"<html><head><title>DuckDuckGo</title></head><body><div id='links'>{ads}{body}</div></body></html>"


def brave_json(hits: Sequence[SearchHit]) -> dict[str, Any]:
    return {
        "type": "search",
        "web": {
            "results": [
                {
                    "title": hit.title,
                    "url": hit.url,
                    "description": f"<strong>{html.escape(hit.snippet)}</strong>",
                    "age": "2 days ago",
                    "profile": {"name": "Example Site"},
                }
                for hit in hits
            ]
        },
    }
