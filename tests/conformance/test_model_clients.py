"""The ModelClient conformance suite against both clients: the scripted in-process one the loop's unit tests use,
and the Anthropic adapter on the real `anthropic` SDK talking to the fake Anthropic server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from general_agent import testing as fake
from general_agent_server.model import scripted
from general_agent_server.model.anthropic import AnthropicModelClient
from general_agent_server.model.port import HTTP_CLIENTS, Credential, ModelClient
from general_agent_server.model.testing import ModelClientConformance


class TestScriptedModelClient(ModelClientConformance):
    async def client_for(self, answers: Sequence[scripted.Answer]) -> ModelClient:
        return scripted.ScriptedModelClient(answers)


def _block(block: scripted.Block) -> fake.Block:
    if isinstance(block, scripted.Text):
        return fake.TextBlock(block.text, chunks=list(block.deltas()))
    if isinstance(block, scripted.Thinking):
        return fake.ThinkingBlock(block.thinking, signature=block.signature, chunks=list(block.deltas()))
    return fake.ToolUseBlock(id=block.id, name=block.name, input=block.input)


def _reply(reply: scripted.Reply) -> fake.Reply:
    return fake.Reply(
        blocks=tuple(_block(b) for b in reply.blocks),
        stop_reason=reply.stop_reason,
        usage=fake.Usage(input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens),
    )


def fake_answer(answer: scripted.Answer) -> fake.ReplyLike:
    """The fake server's equivalent of a scripted answer."""
    if isinstance(answer, scripted.Reply):
        return _reply(answer)
    if isinstance(answer, scripted.Hang):
        assert answer.after_blocks == 0, "the fake hangs by event count: only a hang before any block translates"
        return fake.HangReply(after_events=1, reply=_reply(answer.reply))
    if answer.after_blocks is None:
        return fake.ErrorReply(status=answer.http_status or 500, error_type=answer.error_type, message=answer.message)
    partial = _reply(answer.partial) if answer.partial is not None else None
    return fake.StreamErrorReply(
        after_blocks=answer.after_blocks, error_type=answer.error_type, message=answer.message, reply=partial
    )


class TestAnthropicModelClient(ModelClientConformance):
    """On the default HTTP client (the SDK's aiohttp transport)."""

    http_client = HTTP_CLIENTS[0]

    @pytest.fixture(autouse=True)
    async def _server(self) -> AsyncIterator[None]:
        async with fake.FakeAnthropic() as server:
            self.fake = server
            self.credential = Credential(api_key="sk-ant-conformance-key-000000", base_url=server.base_url)
            self.clients: list[AnthropicModelClient] = []
            yield
            for client in self.clients:
                await client.close()

    async def client_for(self, answers: Sequence[scripted.Answer]) -> ModelClient:
        self.fake.enqueue(*(fake_answer(a) for a in answers))
        client = AnthropicModelClient(timeout_seconds=10, max_retries=0, http_client=self.http_client)
        self.clients.append(client)
        return client


class TestAnthropicModelClientOnHttpx(TestAnthropicModelClient):
    """The same suite on the SDK's default HTTP client (`model_http_client = "httpx"`)."""

    http_client = "httpx"
