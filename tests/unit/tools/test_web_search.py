"""web_search against local fakes of DuckDuckGo's HTML endpoint and the Brave Search API."""

from __future__ import annotations

import json
import logging
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.config import load_settings
from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.tools.web.brave import BraveProvider
from general_agent_server.tools.web.duckduckgo import DuckDuckGoProvider, decode_result_url
from general_agent_server.tools.web.search import WebSearchTool
from tests.support.fake_web import BRAVE_PATH, DDG_CHALLENGE, DDG_PATH, FakeWeb, SearchHit
from tests.unit.tools.web_support import context, payload_of, untrusted_content

BRAVE_KEY = "brave-secret-key-0123456789"
HITS = [
    SearchHit(f"Result {n} <b>&</b> co", f"https://www.site{n}.example/page?id={n}&x=y", f"Snippet number {n}")
    for n in range(1, 13)
]


def ddg_tool(web: FakeWeb, ttl: float = 900) -> WebSearchTool:
    return WebSearchTool(DuckDuckGoProvider(web.url(DDG_PATH), "TestAgent/1.0"), ttl)


def brave_tool(web: FakeWeb, key: str = BRAVE_KEY) -> WebSearchTool:
    return WebSearchTool(BraveProvider(web.url(BRAVE_PATH), key, today=lambda: date(2025, 6, 30)), 900)


async def search(tool: WebSearchTool, tmp_path: Path, **arguments: Any) -> dict[str, Any]:
    return payload_of(await tool.run(arguments, context(tmp_path)))


def unwrap(text: str) -> str:
    return untrusted_content(text, "Web Search", whole=True)


async def test_duckduckgo_results(web: FakeWeb, tmp_path: Path) -> None:
    web.duckduckgo(HITS[:3], ad=SearchHit("Buy now", "https://ads.example/", "an ad"))
    payload = await search(ddg_tool(web), tmp_path, query="moths of europe", region="uk-en", safeSearch="strict")
    assert payload["query"] == "moths of europe"
    assert payload["provider"] == "duckduckgo"
    assert payload["count"] == 3
    assert payload["externalContent"] == {
        "untrusted": True,
        "source": "web_search",
        "provider": "duckduckgo",
        "wrapped": True,
    }
    results = payload["results"]
    assert [(unwrap(r["title"]), r["url"], unwrap(r["snippet"]), r["siteName"]) for r in results] == [
        (
            f"Result {n} <b>&</b> co",
            f"https://www.site{n}.example/page?id={n}&x=y",
            f"Snippet number {n}",
            f"site{n}.example",
        )
        for n in (1, 2, 3)
    ]
    request = web.requests[0]
    assert request.query == {"q": "moths of europe", "kl": "uk-en", "kp": "1"}
    assert request.headers["user-agent"] == "TestAgent/1.0"


@pytest.mark.parametrize(("count", "expected"), [(None, 5), (0, 1), (-3, 1), (3, 3), (50, 10)])
async def test_count_is_clamped(web: FakeWeb, tmp_path: Path, count: int | None, expected: int) -> None:
    web.duckduckgo(HITS)
    arguments: dict[str, Any] = {"query": "q"} if count is None else {"query": "q", "count": count}
    payload = await search(ddg_tool(web), tmp_path, **arguments)
    assert payload["count"] == len(payload["results"]) == expected
    assert web.requests[0].query["kp"] == "-1"  # moderate by default


async def test_duckduckgo_bot_challenge(web: FakeWeb, tmp_path: Path) -> None:
    web.page(DDG_PATH, DDG_CHALLENGE)
    with pytest.raises(ToolFailure, match=r"^DuckDuckGo returned a bot-detection challenge\.$"):
        await ddg_tool(web).run({"query": "q"}, context(tmp_path))


async def test_duckduckgo_http_error(web: FakeWeb, tmp_path: Path) -> None:
    web.page(DDG_PATH, "<html><body><p>Service unavailable</p></body></html>", status=503)
    with pytest.raises(ToolFailure) as failure:
        await ddg_tool(web).run({"query": "q"}, context(tmp_path))
    assert failure.value.message.startswith("DuckDuckGo search error (503): <<<EXTERNAL_UNTRUSTED_CONTENT")
    assert "\nService unavailable\n" in failure.value.message


async def test_duckduckgo_no_results(web: FakeWeb, tmp_path: Path) -> None:
    web.duckduckgo([])
    payload = await search(ddg_tool(web), tmp_path, query="zzzz")
    assert (payload["count"], payload["results"]) == (0, [])


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("//duckduckgo.com/l/?uddg=https%3A%2F%2Fa.example%2Fx%3Fy%3D1&rut=1", "https://a.example/x?y=1"),
        ("https://duckduckgo.com/l/?uddg=http%3A%2F%2Fb.example%2F", "http://b.example/"),
        ("https://c.example/direct", "https://c.example/direct"),
        ("//duckduckgo.com/y.js?ad_domain=x&u3=https%3A%2F%2Fads.example", None),
        ("//duckduckgo.com/l/?uddg=javascript%3Aalert(1)", None),
        ("/settings", None),
    ],
)
def test_result_url_decoding(href: str, expected: str | None) -> None:
    assert decode_result_url(href) == expected


async def test_search_cache(web: FakeWeb, tmp_path: Path) -> None:
    web.duckduckgo(HITS[:2])
    tool = ddg_tool(web)
    first = await search(tool, tmp_path, query="cache me")
    second = await search(tool, tmp_path, query="cache me")
    assert second.pop("cached") is True
    assert second == first
    await search(tool, tmp_path, query="cache me", count=1)
    await search(tool, tmp_path, query="cache me", region="de-de")
    assert len(web.requests) == 3
    uncached = ddg_tool(web, ttl=0)
    await search(uncached, tmp_path, query="cache me")
    assert "cached" not in await search(uncached, tmp_path, query="cache me")
    assert len(web.requests) == 5


@pytest.mark.parametrize("query", ["", "   "])
async def test_query_is_required(web: FakeWeb, tmp_path: Path, query: str) -> None:
    with pytest.raises(ToolFailure, match=r"^query is required\.$"):
        await ddg_tool(web).run({"query": query}, context(tmp_path))
    assert web.requests == []


async def test_brave_results(web: FakeWeb, tmp_path: Path) -> None:
    web.brave(HITS[:2], api_key=BRAVE_KEY)
    payload = await search(
        brave_tool(web),
        tmp_path,
        query="moths",
        count=2,
        country="gb",
        language="ja",
        freshness="week",
        ui_lang="en-GB",
    )
    assert payload["provider"] == "brave"
    assert payload["externalContent"]["provider"] == "brave"
    assert [
        (unwrap(r["title"]), r["url"], unwrap(r["description"]), r["published"], r["siteName"])
        for r in payload["results"]
    ] == [
        (
            f"Result {n} <b>&</b> co",
            f"https://www.site{n}.example/page?id={n}&x=y",
            f"Snippet number {n}",
            "2 days ago",
            "Example Site",
        )
        for n in (1, 2)
    ]
    request = web.requests[0]
    assert request.headers["x-subscription-token"] == BRAVE_KEY
    assert request.headers["accept"] == "application/json"
    assert request.query == {
        "q": "moths",
        "count": "2",
        "country": "GB",
        "search_lang": "jp",
        "ui_lang": "en-GB",
        "freshness": "pw",
    }


@pytest.mark.parametrize(
    ("arguments", "freshness"),
    [
        ({"freshness": "2024-01-01to2024-02-01"}, "2024-01-01to2024-02-01"),
        ({"freshness": "py"}, "py"),
        ({"date_after": "2025-01-15"}, "2025-01-15to2025-06-30"),
        ({"date_before": "2020-05-01"}, "1970-01-01to2020-05-01"),
        ({"date_after": "2024-01-01", "date_before": "2024-03-01"}, "2024-01-01to2024-03-01"),
    ],
)
async def test_brave_time_filters(web: FakeWeb, tmp_path: Path, arguments: dict[str, str], freshness: str) -> None:
    web.brave(HITS[:1], api_key=BRAVE_KEY)
    await search(brave_tool(web), tmp_path, query="q", **arguments)
    assert web.requests[0].query["freshness"] == freshness


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"search_lang": "klingon"}, "invalid_search_lang"),
        ({"ui_lang": "english"}, "invalid_ui_lang"),
        ({"freshness": "fortnight"}, "invalid_freshness"),
        ({"freshness": "week", "date_after": "2024-01-01"}, "conflicting_time_filters"),
        ({"date_after": "yesterday"}, "invalid_date"),
        ({"freshness": "2024-13-01to2024-12-31"}, "invalid_date"),
        ({"date_after": "2024-05-01", "date_before": "2024-04-01"}, "invalid_date_range"),
    ],
)
async def test_brave_validation_errors(web: FakeWeb, tmp_path: Path, arguments: dict[str, str], error: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        await brave_tool(web).run({"query": "q", **arguments}, context(tmp_path))
    assert failure.value.details["error"] == error
    assert failure.value.details["message"] == failure.value.message
    assert failure.value.details["docs"].startswith("https://")
    assert web.requests == []


async def test_brave_http_error_does_not_leak_the_key(
    web: FakeWeb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    web.brave(HITS[:1], api_key="another-key")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ToolFailure) as failure:
        await brave_tool(web).run({"query": "q"}, context(tmp_path))
    assert failure.value.message.startswith("Brave Search API error (401): ")
    assert "UNAUTHORIZED" in failure.value.message
    assert BRAVE_KEY not in repr(failure.value.details) + failure.value.message
    assert BRAVE_KEY not in caplog.text


async def test_brave_key_echoed_by_the_server_is_scrubbed(web: FakeWeb, tmp_path: Path) -> None:
    web.page(BRAVE_PATH, f"bad token {BRAVE_KEY}", content_type="text/plain", status=429)
    with pytest.raises(ToolFailure) as failure:
        await brave_tool(web).run({"query": "q"}, context(tmp_path))
    assert failure.value.message == "Brave Search API error (429): bad token [REDACTED]"


async def test_brave_success_output_never_contains_the_key(
    web: FakeWeb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    web.brave(HITS[:3], api_key=BRAVE_KEY)
    caplog.set_level(logging.DEBUG)
    outcome = await brave_tool(web).run({"query": "q"}, context(tmp_path))
    assert BRAVE_KEY not in outcome.error_text + outcome.details_json
    assert BRAVE_KEY not in caplog.text


def test_provider_is_chosen_by_key_and_shapes_the_schema() -> None:
    keyless = WebSearchTool.from_settings(load_settings(None, {}))
    assert keyless.spec.description.startswith("Search the web (DuckDuckGo).")
    assert set(keyless.spec.input_schema["properties"]) == {"query", "count", "region", "safeSearch"}
    keyed = WebSearchTool.from_settings(load_settings(None, {"BRAVE_SEARCH_API_KEY": BRAVE_KEY}))
    assert keyed.spec.description.startswith("Search the web (Brave Search).")
    assert set(keyed.spec.input_schema["properties"]) == {
        "query",
        "count",
        "country",
        "language",
        "freshness",
        "date_after",
        "date_before",
        "search_lang",
        "ui_lang",
    }
    for tool in (keyless, keyed):
        assert tool.spec.read_only
        assert tool.spec.input_schema["additionalProperties"] is False
        assert BRAVE_KEY not in json.dumps(tool.spec.api_definition())
