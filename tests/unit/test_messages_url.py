"""The Anthropic adapter posts to the Messages URL it joined once per client (model/anthropic.py `messages_url`):
the same URL the SDK builds from a relative path, for every shape of base URL a credential may carry."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from general_agent_server.model.anthropic import messages_url

BASE_URLS = [
    "http://127.0.0.1:9",
    "http://127.0.0.1:9/",
    "https://proxy.example/anthropic",
    "https://proxy.example/anthropic/",
    "https://proxy.example:8443/a/b",
    "https://user:secret@proxy.example/gateway",
]


async def _posted_url(base_url: str, path: str) -> str:
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(200, json={})

    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-url-test-0000",
        base_url=base_url,
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    async with client:
        await client.post(path, cast_to=object, body={})
    return seen[0]


@pytest.mark.parametrize("base_url", BASE_URLS)
async def test_the_joined_url_is_the_one_the_sdk_builds_from_the_relative_path(base_url: str) -> None:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-url-test-0000", base_url=base_url)
    joined = messages_url(client.base_url)
    assert joined.endswith("/v1/messages")
    assert await _posted_url(base_url, joined) == await _posted_url(base_url, "/v1/messages")
