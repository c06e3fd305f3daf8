"""The pre-encoded request body (model/wire_body.py) is what the plain SDK call would send.

A conversation grows over several calls as a session's does (the same history objects passed again, with the
session's history encoding, so the closed messages come from what it kept); at every call the Anthropic
adapter's request and the plain `messages.create(stream=True)` with the same parameters both reach the fake
Anthropic server, and the fake's recorded bodies must be equal as parsed JSON, with the same `anthropic-beta` and
content type."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from general_agent import testing as fake
from general_agent_server.domain.content import ImagePart, TextPart
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionConfig, ThinkingConfig, ThinkingMode
from general_agent_server.model.anthropic import AnthropicModelClient
from general_agent_server.model.history_encoding import HistoryEncoding
from general_agent_server.model.port import Credential, ModelRequest
from general_agent_server.model.request_builder import build_request, user_content_blocks
from general_agent_server.model.wire_body import BodyEncoder, dumps

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
TOOLS: list[dict[str, Any]] = [
    {"name": "glob", "description": "Files matching a pattern.", "input_schema": {"type": "object"}},
    {
        "name": "read",
        "description": "Reads a file — «as is».",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
]
BUDGET = SessionConfig(max_tokens=4096, thinking=ThinkingConfig(mode=ThinkingMode.BUDGET, budget_tokens=2048))


def sdk_params(request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments the adapter sent before it pre-encoded bodies."""
    params: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens, "messages": request.messages}
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = request.tools
    if request.thinking is not None:
        params["thinking"] = request.thinking
    if request.betas:
        params["extra_headers"] = {"anthropic-beta": ",".join(request.betas)}
    return params


def conversation() -> list[list[HistoryMessage]]:
    """Five calls' histories: text, an image, a tool round with thinking, a failed call's double user message."""
    user = HistoryMessage(role="user", content=user_content_blocks([TextPart(text='héllo ✓ "quoted"\n')]))
    answer = HistoryMessage(
        role="assistant",
        content=(
            {"type": "thinking", "thinking": "think…", "signature": "c2ln"},
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "glob", "input": {"pattern": "*.txt", "n": 1.5}},
        ),
        model_ref="claude-haiku-4-5",
    )
    results = HistoryMessage(
        role="user",
        content=(
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\nb.txt"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no", "is_error": True},
        ),
    )
    image = HistoryMessage(role="user", content=user_content_blocks([ImagePart(data=PNG, mime_type="image/png")]))
    foreign = HistoryMessage(
        role="assistant",
        content=({"type": "thinking", "thinking": "other family", "signature": "x"}, {"type": "text", "text": "ok"}),
        model_ref="claude-sonnet-4-6",
    )
    again = HistoryMessage(role="user", content=({"type": "text", "text": "again"},))
    return [
        [user],
        [user, answer, results],
        [user, answer, results, foreign, image],
        [user, answer, results, foreign, image, again],
        [user, answer, results, foreign, image, again, again],
    ]


def request_for(
    history: list[HistoryMessage],
    *,
    system: str,
    tools: list[dict[str, Any]],
    encoding: HistoryEncoding | None = None,
) -> ModelRequest:
    return build_request(
        config=BUDGET,
        model_ref="anthropic/claude-haiku-4-5",
        system_prompt=system,
        history=history,
        tools=tools,
        max_tokens_cap=64_000,
        encoding=encoding,
    )


@pytest.fixture
async def server() -> AsyncIterator[fake.FakeAnthropic]:
    async with fake.FakeAnthropic() as server:
        yield server


@pytest.mark.parametrize("kept", [True, False], ids=["session-encoding", "no-encoding"])
async def test_every_call_sends_the_body_the_plain_sdk_call_sends(server: fake.FakeAnthropic, kept: bool) -> None:
    credential = Credential(api_key="sk-ant-wire-body-test-0000", base_url=server.base_url)
    adapter = AnthropicModelClient(timeout_seconds=10, max_retries=0)
    plain = anthropic.AsyncAnthropic(
        api_key=credential.api_key,
        base_url=server.base_url,
        max_retries=0,
        default_headers={"accept-encoding": "identity"},
    )
    calls = 0
    try:
        for system, tools in (("Be brief.", TOOLS), ("", [])):
            encoding = HistoryEncoding() if kept else None
            for history in conversation():
                request = request_for(history, system=system, tools=tools, encoding=encoding)
                assert (request.encoded_prefix is not None) == (kept and len(history) > 2)
                events = [e async for e in adapter.stream(request, credential)]
                assert events, "the adapter's call streamed nothing"
                stream = await plain.messages.create(**sdk_params(request), stream=True)
                async for _ in stream:
                    pass
                calls += 2
                sent, expected = (await server.wait_for_requests(calls))[-2:]
                assert sent.body == expected.body
                assert sent.headers.get("anthropic-beta") == expected.headers.get("anthropic-beta")
                assert sent.headers.get("content-type") == expected.headers.get("content-type") == "application/json"
    finally:
        await adapter.close()
        await plain.close()
    with_tools = server.requests[2]
    assert with_tools.headers.get("anthropic-beta") == "interleaved-thinking-2025-05-14"
    assert with_tools.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert with_tools.body["tools"][-1]["cache_control"] == {"type": "ephemeral"}


def test_a_tools_list_is_encoded_once_and_the_kept_lists_are_bounded() -> None:
    encoder = BodyEncoder(max_tool_sets=2)
    history = conversation()[1]
    first = request_for(history, system="s", tools=TOOLS)
    assert encoder.body(first) == dumps(sdk_body(first))
    assert encoder.body(request_for(history, system="s", tools=TOOLS)) == dumps(sdk_body(first))
    assert encoder.kept_tool_sets == 1  # the marked list of one tool set is one object (model/request_builder.py)
    for extra in range(3):
        tools = [*TOOLS, {"name": f"t{extra}", "description": "", "input_schema": {"type": "object"}}]
        request = request_for(history, system="s", tools=tools)
        assert encoder.body(request) == dumps(sdk_body(request))
        assert encoder.kept_tool_sets <= 2


def sdk_body(request: ModelRequest) -> dict[str, Any]:
    """The body dict the SDK's `messages.create(stream=True)` encodes, in its key order."""
    params = sdk_params(request)
    params.pop("extra_headers", None)
    order = ("max_tokens", "messages", "model", "stream", "system", "thinking", "tools")
    body = {**params, "stream": True}
    return {key: body[key] for key in order if key in body}
