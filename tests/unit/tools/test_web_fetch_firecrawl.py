"""web_fetch's Firecrawl fallback against a local fake Firecrawl API: when it is used (unreachable origin, non-2xx,
HTML without readable content), when it is not (no key, SSRF blocks), the request it sends, its failures, and
that the key never shows up in what the tool returns."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from general_agent_server.config import load_settings
from general_agent_server.security.ssrf import SsrfGuard
from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.tools.web.fetch import WebFetchConfig, WebFetchTool
from general_agent_server.tools.web.firecrawl import FirecrawlConfig, scrape_endpoint
from tests.support.fake_web import FIRECRAWL_PATH, FakeWeb
from tests.unit.tools.test_web_fetch import ALLOW_LOCAL, CONFIG, content_of, fetch
from tests.unit.tools.web_support import context

KEY = "fc-test-key-0123456789abcdef"
SCRAPED = "# Scraped title\n\nThe **rendered** page, as [markdown](https://example.org/more)."
JS_APP = "<html><head><title>App</title></head><body><div id='root'></div><script>render()</script></body></html>"
TABLE_ONLY = "<html><body><table><tr><td>alpha</td><td>beta</td></tr></table></body></html>"


@pytest.fixture
async def firecrawl() -> AsyncIterator[FakeWeb]:
    """The Firecrawl API on its own server, so its requests are recorded apart from the origin's."""
    async with FakeWeb() as server:
        yield server


def with_firecrawl(
    api: FakeWeb, *, base_url: str | None = None, only_main_content: bool = True, max_age_ms: int = 172_800_000
) -> WebFetchTool:
    config = FirecrawlConfig(
        api_key=KEY,
        base_url=base_url or api.base_url,
        only_main_content=only_main_content,
        max_age_ms=max_age_ms,
        timeout_seconds=5,
    )
    return WebFetchTool(replace(CONFIG, firecrawl=config), ALLOW_LOCAL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_non_2xx_origin_is_scraped_through_firecrawl(
    web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    web.page("/walled", "<html><body>Access denied</body></html>", status=403)
    firecrawl.firecrawl(
        api_key=KEY,
        markdown=SCRAPED,
        metadata={"title": "Scraped title", "url": "https://example.org/walled", "statusCode": 200},
        warning="Served from cache",
    )
    payload = await fetch(with_firecrawl(firecrawl), tmp_path, url=web.url("/walled"))
    assert {k: payload[k] for k in ("url", "finalUrl", "status", "contentType", "extractor", "extractMode")} == {
        "url": web.url("/walled"),
        "finalUrl": "https://example.org/walled",
        "status": 200,
        "contentType": "text/markdown",
        "extractor": "firecrawl",
        "extractMode": "markdown",
    }
    assert content_of(payload["text"]) == SCRAPED
    assert payload["text"].startswith("SECURITY NOTICE:")
    assert content_of(payload["title"]) == "Scraped title"
    assert "Served from cache" in payload["warning"]
    assert payload["warning"].startswith("<<<EXTERNAL_UNTRUSTED_CONTENT")
    assert payload["rawLength"] == len(SCRAPED)
    (request,) = firecrawl.requests
    assert (request.method, request.path) == ("POST", FIRECRAWL_PATH)
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "url": web.url("/walled"),
        "formats": ["markdown"],
        "onlyMainContent": True,
        "timeout": 5000,
        "maxAge": 172_800_000,
        "proxy": "auto",
        "storeInCache": True,
    }
    assert KEY not in json.dumps(payload)
    assert "/v2/scrape" in caplog.text  # httpx logged the call, without the key
    assert KEY not in caplog.text


async def test_refused_connection_is_scraped_through_firecrawl(firecrawl: FakeWeb, tmp_path: Path) -> None:
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED, metadata={"statusCode": 203})
    url = f"http://127.0.0.1:{free_port()}/down"
    tool = with_firecrawl(firecrawl, only_main_content=False, max_age_ms=0)
    payload = await fetch(tool, tmp_path, url=url, extractMode="text")
    assert (payload["finalUrl"], payload["status"], payload["extractor"]) == (url, 203, "firecrawl")
    # Text mode strips the markdown Firecrawl returns.
    assert content_of(payload["text"]) == "Scraped title\n\nThe rendered page, as markdown."
    assert "title" not in payload
    body = firecrawl.requests[0].json()
    assert (body["url"], body["onlyMainContent"], body["maxAge"]) == (url, False, 0)


async def test_html_without_readable_content_is_scraped_through_firecrawl(
    web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path
) -> None:
    """A client-rendered page: Readability finds nothing in the served HTML; Firecrawl renders it."""
    web.page("/app", JS_APP)
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED, metadata={"title": "Rendered app", "statusCode": 200})
    payload = await fetch(with_firecrawl(firecrawl), tmp_path, url=web.url("/app"))
    assert (payload["extractor"], payload["contentType"], payload["status"]) == ("firecrawl", "text/markdown", 200)
    assert payload["finalUrl"] == web.url("/app")
    assert content_of(payload["text"]) == SCRAPED
    assert content_of(payload["title"]) == "Rendered app"
    assert firecrawl.requests[0].json()["url"] == web.url("/app")


async def test_readable_html_does_not_call_firecrawl(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    web.page("/article", "<html><body><article><p>" + "Plenty of readable words here. " * 20 + "</p></article>")
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED)
    payload = await fetch(with_firecrawl(firecrawl), tmp_path, url=web.url("/article"))
    assert payload["extractor"] == "readability"
    assert firecrawl.requests == []


async def test_firecrawl_errors_on_an_unreadable_page_are_swallowed(
    web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path
) -> None:
    web.page("/table", TABLE_ONLY)
    web.page("/app", JS_APP)
    firecrawl.firecrawl(api_key=KEY, error_status=500, error="scrape engine down")
    tool = with_firecrawl(firecrawl)
    payload = await fetch(tool, tmp_path, url=web.url("/table"))
    assert payload["extractor"] == "raw-html"
    assert "alpha" in content_of(payload["text"])
    with pytest.raises(ToolFailure) as failure:
        await tool.run({"url": web.url("/app")}, context(tmp_path))
    assert failure.value.message == (
        "Web fetch extraction failed: Readability, Firecrawl, and basic HTML cleanup returned no content."
    )
    assert len(firecrawl.requests) == 2


async def test_firecrawl_failure_message(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    # A provider that echoes the key back must not get it into the error.
    firecrawl.firecrawl(api_key=KEY, error_status=402, error=f"Payment required for key {KEY}")
    with pytest.raises(ToolFailure) as failure:
        await with_firecrawl(firecrawl).run({"url": web.url("/walled")}, context(tmp_path))
    message = failure.value.message
    assert message.startswith("Firecrawl fetch failed (402): SECURITY NOTICE:")
    assert content_of(message.split("\n\n", 1)[1]) == "Payment required for key [REDACTED]"
    assert KEY not in message
    assert KEY not in json.dumps(failure.value.details)


async def test_wrong_key_is_a_firecrawl_failure(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    firecrawl.firecrawl(api_key="another-key")
    with pytest.raises(ToolFailure) as failure:
        await with_firecrawl(firecrawl).run({"url": web.url("/walled")}, context(tmp_path))
    assert failure.value.message.startswith("Firecrawl fetch failed (401): ")
    assert "Unauthorized: invalid token" in failure.value.message
    assert KEY not in failure.value.message


async def test_unreachable_firecrawl(web: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    config = FirecrawlConfig(api_key=KEY, base_url=f"http://127.0.0.1:{free_port()}", timeout_seconds=5)
    tool = WebFetchTool(replace(CONFIG, firecrawl=config), ALLOW_LOCAL)
    with pytest.raises(ToolFailure, match=r"^Firecrawl fetch failed: could not connect to 127\.0\.0\.1$") as failure:
        await tool.run({"url": web.url("/walled")}, context(tmp_path))
    assert KEY not in failure.value.message


async def test_not_used_without_a_key(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED)
    with pytest.raises(ToolFailure, match=r"^Web fetch failed \(403\): "):
        await WebFetchTool(CONFIG, ALLOW_LOCAL).run({"url": web.url("/walled")}, context(tmp_path))
    assert firecrawl.requests == []


def test_settings_enable_firecrawl_only_with_a_key() -> None:
    assert WebFetchConfig.from_settings(load_settings(None, {})).firecrawl is None
    disabled = {"FIRECRAWL_API_KEY": KEY, "GENERAL_AGENT_WEB_FETCH_FIRECRAWL_ENABLED": "false"}
    assert WebFetchConfig.from_settings(load_settings(None, disabled)).firecrawl is None
    config = WebFetchConfig.from_settings(
        load_settings(None, {"FIRECRAWL_API_KEY": KEY, "GENERAL_AGENT_WEB_FETCH_TIMEOUT_SECONDS": "12"})
    )
    assert config.firecrawl == FirecrawlConfig(
        api_key=KEY,
        base_url="https://api.firecrawl.dev",
        only_main_content=True,
        max_age_ms=172_800_000,
        timeout_seconds=12,  # 0 means the fetch timeout
    )
    assert KEY not in repr(config)
    tool = WebFetchTool(config, SsrfGuard())
    assert tool.spec.timeout_seconds == 12 + 12 + 30


@pytest.mark.parametrize(
    ("base_url", "endpoint"),
    [
        ("https://api.firecrawl.dev", "https://api.firecrawl.dev/v2/scrape"),
        ("https://api.firecrawl.dev/", "https://api.firecrawl.dev/v2/scrape"),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000/v2/scrape"),
        ("https://proxy.example/firecrawl/v1/scrape", "https://proxy.example/firecrawl/v1/scrape"),
    ],
)
def test_scrape_endpoint(base_url: str, endpoint: str) -> None:
    assert scrape_endpoint(base_url) == endpoint


async def test_custom_endpoint_path_is_used_as_is(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED, path="/custom/scrape")
    payload = await fetch(
        with_firecrawl(firecrawl, base_url=firecrawl.url("/custom/scrape")), tmp_path, url=web.url("/walled")
    )
    assert payload["extractor"] == "firecrawl"
    assert firecrawl.paths() == ["/custom/scrape"]


async def test_ssrf_blocks_never_fall_back(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED)
    tool = with_firecrawl(firecrawl)
    with pytest.raises(ToolFailure, match=r"^SSRF blocked: 169\.254\.169\.254 is a link-local address$"):
        await tool.run({"url": "http://169.254.169.254/latest/meta-data/"}, context(tmp_path))
    async with FakeWeb(host="127.0.0.2") as internal:
        web.redirect("/hop", internal.url("/secret"))
        with pytest.raises(ToolFailure, match=r"^SSRF blocked: 127\.0\.0\.2 is a loopback address$"):
            await tool.run({"url": web.url("/hop")}, context(tmp_path))
        assert internal.requests == []
    assert firecrawl.requests == []


async def test_the_firecrawl_host_passes_the_ssrf_guard(web: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    async with FakeWeb(host="127.0.0.2") as internal:
        internal.firecrawl(api_key=KEY, markdown=SCRAPED)
        config = FirecrawlConfig(api_key=KEY, base_url=internal.base_url, timeout_seconds=5)
        tool = WebFetchTool(replace(CONFIG, firecrawl=config), ALLOW_LOCAL)
        with pytest.raises(ToolFailure, match=r"^SSRF blocked: 127\.0\.0\.2 is a loopback address$"):
            await tool.run({"url": web.url("/walled")}, context(tmp_path))
        assert internal.requests == []


async def test_firecrawl_payloads_are_cached(web: FakeWeb, firecrawl: FakeWeb, tmp_path: Path) -> None:
    web.page("/walled", "denied", status=403, content_type="text/plain")
    firecrawl.firecrawl(api_key=KEY, markdown=SCRAPED)
    tool = with_firecrawl(firecrawl)
    first = await fetch(tool, tmp_path, url=web.url("/walled"))
    second = await fetch(tool, tmp_path, url=web.url("/walled"))
    assert second.pop("cached") is True
    assert second == first
    assert len(firecrawl.requests) == 1
