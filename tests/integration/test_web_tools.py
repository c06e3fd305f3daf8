"""web_fetch and web_search through real turns in the default (GENERAL) mode, against local fakes: the model
gets the pretty JSON payload, hosts get it as details, and a blocked address is a tool_error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc
from tests.conftest import ServerFactory
from tests.support.events import ONE_TOOL_THEN_TEXT, kinds, last_of
from tests.support.fake_web import DDG_PATH, FIRECRAWL_PATH, FakeWeb, SearchHit
from tests.support.rpc import Stub, create_session, stream_turn

ARTICLE = """<html><head><title>Lichens</title></head><body><article><h1>Lichens</h1>
<p>A lichen is a partnership between a fungus and an alga or cyanobacterium, and it grows on bark, rock and
soil in almost every habitat on Earth, from deserts to the Arctic tundra.</p>
<p>Lichens grow slowly, often less than a millimetre a year, which makes old colonies useful for dating the
rock surfaces they cover.</p></article></body></html>"""


@dataclass
class Env:
    stub: Stub
    web: FakeWeb


@pytest.fixture
async def env(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Env]:
    async with FakeWeb() as web:
        server = await server_factory(
            {
                "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces"),
                "GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1",
                "GENERAL_AGENT_WEB_SEARCH_DUCKDUCKGO_URL": web.url(DDG_PATH),
            }
        )
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield Env(stub=agent_service_pb2_grpc.AgentServiceStub(channel), web=web)


def tool_call(call_id: str, name: str, **arguments: Any) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name=name, input=arguments)])


def tool_result_sent(fake_model: FakeAnthropic, request_index: int) -> dict[str, Any]:
    last = fake_model.requests[request_index].messages[-1]
    blocks: list[dict[str, Any]] = [b for b in last["content"] if b.get("type") == "tool_result"]
    assert len(blocks) == 1
    return blocks[0]


def sent_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


async def test_general_mode_offers_the_web_tools(env: Env, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(env.stub)).identity.session_id
    await stream_turn(env.stub, sid, "hi")
    tools = {t["name"]: t for t in fake_model.requests[0].tools}
    assert {"web_fetch", "web_search"} <= set(tools)
    assert tools["web_fetch"]["input_schema"]["required"] == ["url"]
    assert set(tools["web_search"]["input_schema"]["properties"]) == {"query", "count", "region", "safeSearch"}


async def test_web_fetch_turn(env: Env, fake_model: FakeAnthropic) -> None:
    env.web.page("/lichens", ARTICLE)
    sid = (await create_session(env.stub)).identity.session_id
    fake_model.enqueue(tool_call("toolu_f1", "web_fetch", url=env.web.url("/lichens")), TextReply("lichens!"))
    events = await stream_turn(env.stub, sid, "what is a lichen?")
    assert kinds(events) == ONE_TOOL_THEN_TEXT
    result = last_of(events, "tool_result")
    assert (result.call_id, result.tool_name, result.is_error) == ("toolu_f1", "web_fetch", False)
    details = json_format.MessageToDict(result.details)
    assert details["finalUrl"] == env.web.url("/lichens")
    assert details["extractor"] == "readability"
    assert "A lichen is a partnership between a fungus" in details["text"]
    assert "<<<EXTERNAL_UNTRUSTED_CONTENT" in details["text"]
    assert json.loads(result.details_json) == details
    block = tool_result_sent(fake_model, 1)
    assert "is_error" not in block
    assert json.loads(sent_text(block)) == json.loads(result.details_json)
    assert env.web.paths() == ["/lichens"]


async def test_web_search_turn(env: Env, fake_model: FakeAnthropic) -> None:
    env.web.duckduckgo([SearchHit("Lichen - Wikipedia", "https://en.wikipedia.org/wiki/Lichen", "A lichen is...")])
    sid = (await create_session(env.stub)).identity.session_id
    fake_model.enqueue(tool_call("toolu_s1", "web_search", query="lichen", count=3), TextReply("found"))
    events = await stream_turn(env.stub, sid, "search lichens")
    assert kinds(events) == ONE_TOOL_THEN_TEXT
    payload = json.loads(last_of(events, "tool_result").details_json)
    assert (payload["provider"], payload["count"]) == ("duckduckgo", 1)
    assert payload["results"][0]["url"] == "https://en.wikipedia.org/wiki/Lichen"
    assert json.loads(sent_text(tool_result_sent(fake_model, 1))) == payload
    assert env.web.requests[0].query["q"] == "lichen"


async def test_blocked_address_is_a_tool_error(env: Env, fake_model: FakeAnthropic) -> None:
    sid = (await create_session(env.stub)).identity.session_id
    fake_model.enqueue(
        tool_call("toolu_b1", "web_fetch", url="http://169.254.169.254/latest/meta-data/"), TextReply("refused")
    )
    events = await stream_turn(env.stub, sid, "fetch metadata")
    assert "tool_result" not in kinds(events)
    error = last_of(events, "tool_error")
    assert (error.call_id, error.tool_name) == ("toolu_b1", "web_fetch")
    assert error.error == "SSRF blocked: 169.254.169.254 is a link-local address"
    block = tool_result_sent(fake_model, 1)
    assert block["is_error"] is True
    assert sent_text(block) == error.error


async def test_redirect_to_a_private_address_is_a_tool_error(env: Env, fake_model: FakeAnthropic) -> None:
    async with FakeWeb(host="127.0.0.2") as internal:
        env.web.redirect("/out", internal.url("/admin"))
        sid = (await create_session(env.stub)).identity.session_id
        fake_model.enqueue(tool_call("toolu_b2", "web_fetch", url=env.web.url("/out")), TextReply("refused"))
        events = await stream_turn(env.stub, sid, "follow it")
        assert last_of(events, "tool_error").error == "SSRF blocked: 127.0.0.2 is a loopback address"
        assert internal.requests == []


async def test_web_fetch_falls_back_to_firecrawl(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    key = "fc-integration-key-9876543210"
    async with FakeWeb() as web, FakeWeb() as firecrawl:
        web.page("/walled", "<html><body>Access denied</body></html>", status=403)
        firecrawl.firecrawl(api_key=key, markdown="# Lichens\n\nRendered by Firecrawl.", metadata={"title": "Lichens"})
        server = await server_factory(
            {
                "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces"),
                "GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1",
                "GENERAL_AGENT_WEB_FETCH_FIRECRAWL_BASE_URL": firecrawl.base_url,
                "FIRECRAWL_API_KEY": key,
            }
        )
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            sid = (await create_session(stub)).identity.session_id
            fake_model.enqueue(tool_call("toolu_fc1", "web_fetch", url=web.url("/walled")), TextReply("read it"))
            events = await stream_turn(stub, sid, "read the walled page")
        assert kinds(events) == ONE_TOOL_THEN_TEXT
        result = last_of(events, "tool_result")
        assert (result.tool_name, result.is_error) == ("web_fetch", False)
        details = json.loads(result.details_json)
        assert (details["extractor"], details["contentType"], details["status"]) == ("firecrawl", "text/markdown", 200)
        assert "Rendered by Firecrawl." in details["text"]
        assert json.loads(sent_text(tool_result_sent(fake_model, 1))) == details
        (request,) = firecrawl.requests
        assert (request.method, request.path) == ("POST", FIRECRAWL_PATH)
        assert request.headers["authorization"] == f"Bearer {key}"
        assert request.json()["url"] == web.url("/walled")
        assert web.paths() == ["/walled"]
        assert key not in str(events)
        assert all(key not in json.dumps(r.messages) for r in fake_model.requests)
