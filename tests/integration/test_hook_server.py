"""`general_agent.HookServer` against a real server: decorated handlers block tools and shape the prompt
through real turns, None is no opinion, undecorated hooks answer UNIMPLEMENTED, handler exceptions are
logged and follow the binding's failure policy, and the decorators cover every HookService RPC."""

from __future__ import annotations

import logging
import typing
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from general_agent import AgentClient, HookServer
from general_agent.hooks import HookDecorator
from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import hook_pb2, hook_registration_pb2, hook_service_pb2, hook_service_pb2_grpc
from general_agent.v1 import session_messages_pb2 as session_api
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of
from tests.support.rpc import Stub, create_session, stream_turn


@dataclass
class Agent:
    address: str
    client: AgentClient
    stub: Stub
    workspace_root: Path

    def workspace(self, session_id: str) -> Path:
        path = self.workspace_root / "default" / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path


@pytest.fixture
async def agent(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Agent]:
    # Hook targets are loopback here; the allow-list keeps the test valid under the SSRF guard.
    env = {"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1", "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")}
    server = await server_factory(env)
    async with await AgentClient.connect(server.address) as client:
        yield Agent(address=server.address, client=client, stub=client.stub, workspace_root=tmp_path / "ws")


@pytest.fixture
async def started() -> AsyncIterator[list[HookServer]]:
    """Hook servers a test started; stopped at the end even when the test failed."""
    servers: list[HookServer] = []
    yield servers
    for server in servers:
        await server.stop()


def read_call(path: str) -> Reply:
    return Reply(blocks=[ToolUseBlock(id="t1", name="read", input={"path": path})], stop_reason="tool_use")


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


async def test_before_tool_call_blocks_a_tool_through_a_real_turn(
    agent: Agent, fake_model: FakeAnthropic, started: list[HookServer]
) -> None:
    hooks = HookServer(plugin_id="guard")
    seen: list[tuple[str, str, str, str]] = []

    @hooks.before_tool_call(priority=5, timeout=2.5, failure_policy="FAIL_CLOSED")
    async def guard(
        event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext
    ) -> hook_pb2.BeforeToolCallResult | None:
        seen.append((event.tool_name, str(event.params["path"]), context.session_id, context.plugin_id))
        return hook_pb2.BeforeToolCallResult(block=True, block_reason="secrets stay put")

    started.append(hooks)
    await hooks.start()
    stored = await hooks.register(agent.client)
    assert (stored.plugin_id, stored.target.address, stored.tenant) == ("guard", hooks.address, "default")
    [binding] = stored.hooks
    assert binding.name == hook_registration_pb2.HOOK_NAME_BEFORE_TOOL_CALL
    assert (binding.priority, binding.timeout.ToMilliseconds()) == (5, 2500)
    assert binding.failure_policy == hook_registration_pb2.HOOK_FAILURE_POLICY_FAIL_CLOSED

    session = await create_session(agent.stub)
    sid = session.identity.session_id
    fake_model.enqueue(read_call("secret.txt"), TextReply("understood"))
    events = await stream_turn(agent.stub, sid, "read my secret")

    assert kinds(events)[:5] == ["run_started", "usage_snapshot", "tool_call", "tool_error", "turn_complete"]
    assert last_of(events, "tool_error").error == "secrets stay put"
    assert seen == [("read", "secret.txt", sid, "guard")]
    tool_result = fake_model.requests[-1].messages[-1]["content"][0]
    assert (tool_result["type"], tool_result["is_error"]) == ("tool_result", True)
    assert "secrets stay put" in str(tool_result["content"])


async def test_before_prompt_build_injects_context_and_none_lets_the_tool_run(
    agent: Agent, fake_model: FakeAnthropic, started: list[HookServer]
) -> None:
    hooks = HookServer(plugin_id="memory")
    prompts: list[str] = []

    @hooks.before_prompt_build()
    async def recall(
        event: hook_pb2.BeforePromptBuildEvent, context: hook_pb2.HookContext
    ) -> hook_pb2.BeforePromptBuildResult:
        prompts.append(event.prompt)
        return hook_pb2.BeforePromptBuildResult(prepend_context="Recall: the user likes tea.")

    @hooks.before_tool_call()
    async def no_opinion(event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext) -> None:
        return None

    async with hooks:
        started.append(hooks)
        # A raw channel works as well as an AgentClient.
        async with grpc.aio.insecure_channel(agent.address) as channel:
            await hooks.register(channel)
        session = await create_session(agent.stub)
        sid = session.identity.session_id
        (agent.workspace(sid) / "notes.txt").write_text("green tea\n")
        fake_model.enqueue(read_call("notes.txt"), TextReply("tea it is"))
        events = await stream_turn(agent.stub, sid, "What should I drink?")

    assert prompts == ["What should I drink?"]
    assert "tool_error" not in kinds(events)
    assert "green tea" in last_of(events, "tool_result").output[0].text.text
    first = fake_model.requests[0]
    assert first.messages[0]["content"][0]["text"] == "Recall: the user likes tea.\n\nWhat should I drink?"
    history = await agent.stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    assert history.entries[1].message.content[0].text.text == "What should I drink?"  # context is never stored


async def test_handler_failures_follow_the_failure_policy_and_are_logged(
    agent: Agent, started: list[HookServer], caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext) -> None:
        raise RuntimeError("token sk-do-not-leak")

    opened, closed = HookServer(plugin_id="open"), HookServer(plugin_id="closed")
    opened.before_tool_call(priority=10, failure_policy="FAIL_OPEN")(explode)
    closed.before_tool_call(priority=0)(explode)  # the default for before_tool_call: fail closed
    for hooks in (opened, closed):
        started.append(hooks)
        await hooks.start()
        await hooks.register(agent.client)

    with caplog.at_level(logging.ERROR, logger="general_agent.hooks"):
        response = await agent.stub.EmitHook(
            hook_registration_pb2.EmitHookRequest(
                hook_name="before_tool_call", event=struct({"toolName": "write", "params": {}})
            )
        )

    result = json_format.MessageToDict(response.result)
    assert result["block"] is True
    assert "plugin closed" in result["blockReason"]
    errors = {e.plugin_id: e.message for e in response.handler_errors}
    assert sorted(errors) == ["closed", "open"]
    assert all("before_tool_call handler raised RuntimeError" in message for message in errors.values())
    assert not any("sk-do-not-leak" in message for message in errors.values())  # only the type crosses
    failures = [r for r in caplog.records if r.name == "general_agent.hooks"]
    assert sorted(r.getMessage() for r in failures) == [
        "hook before_tool_call of plugin closed failed",
        "hook before_tool_call of plugin open failed",
    ]
    assert all(r.exc_info is not None for r in failures)


async def test_direct_calls_unimplemented_no_opinion_and_wrong_result_types(started: list[HookServer]) -> None:
    hooks = HookServer(plugin_id="direct")

    @hooks.message_sending()
    async def rewrite(event: hook_pb2.MessageSendingEvent, context: hook_pb2.HookContext) -> Any:
        if event.content == "wrong type":
            return hook_pb2.BeforeToolCallResult(block=True)
        if event.content == "leave it":
            return None
        return hook_pb2.MessageSendingResult(content=event.content.upper())

    async with hooks:
        started.append(hooks)

        # Decorated after start: served at once (it would need a new register() to be called).
        @hooks.agent_end()
        async def observed(event: hook_pb2.AgentEndEvent, context: hook_pb2.HookContext) -> None:
            ended.append(event.success)

        ended: list[bool] = []
        async with grpc.aio.insecure_channel(hooks.address) as channel:
            stub = hook_service_pb2_grpc.HookServiceStub(channel)

            def sending(content: str) -> hook_service_pb2.MessageSendingRequest:
                event = hook_pb2.MessageSendingEvent(to="chan", content=content)
                return hook_service_pb2.MessageSendingRequest(event=event)

            assert (await stub.MessageSending(sending("hi"))).result.content == "HI"
            assert not (await stub.MessageSending(sending("leave it"))).HasField("result")
            with pytest.raises(grpc.aio.AioRpcError) as wrong:
                await stub.MessageSending(sending("wrong type"))
            assert wrong.value.code() == grpc.StatusCode.INTERNAL
            assert wrong.value.details() == "message_sending handler raised TypeError"
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await stub.BeforeToolCall(hook_service_pb2.BeforeToolCallRequest())
            assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
            await stub.AgentEnd(hook_service_pb2.AgentEndRequest(event=hook_pb2.AgentEndEvent(success=True)))
            assert ended == [True]
        assert hooks.hooks == ("message_sending", "agent_end")
    with pytest.raises(RuntimeError, match="not started"):
        _ = hooks.address


def test_decoration_mistakes_fail_early() -> None:
    hooks = HookServer(plugin_id="p")

    async def handler(event: Any, context: hook_pb2.HookContext) -> None:
        return None

    def blocking(event: Any, context: hook_pb2.HookContext) -> None:
        return None

    with pytest.raises(ValueError, match="no hook handlers"):
        hooks.registration("127.0.0.1:1")
    with pytest.raises(ValueError, match="unknown hook 'before_everything'"):
        hooks.on("before_everything")
    with pytest.raises(TypeError, match="must be an async function"):
        hooks.on("llm_input")(blocking)  # type: ignore[arg-type]  # mypy rejects it too
    with pytest.raises(ValueError, match="last_n"):
        hooks.on("llm_input", include_messages="LAST_N")(handler)
    with pytest.raises(ValueError, match="timeout"):
        hooks.on("llm_input", timeout=0)(handler)
    hooks.on("llm_input", include_messages="LAST_N", last_n=3, timeout=0.25)(handler)
    with pytest.raises(ValueError, match="already has a handler"):
        hooks.llm_input()(handler)
    [binding] = hooks.registration("127.0.0.1:1").hooks
    assert (binding.include_messages, binding.last_n) == (hook_registration_pb2.HOOK_INCLUDE_MESSAGES_LAST_N, 3)
    assert binding.timeout.ToMilliseconds() == 250
    with pytest.raises(ValueError, match="plugin_id"):
        HookServer(plugin_id=" ")


def test_typed_decorators_reject_mismatched_handlers_under_mypy() -> None:
    """The checks are the `type: ignore` comments: with warn_unused_ignores, mypy fails if it accepts these."""

    async def ends(event: hook_pb2.AgentEndEvent, context: hook_pb2.HookContext) -> None:
        return None

    async def wrong_result(
        event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext
    ) -> hook_pb2.MessageSendingResult:
        return hook_pb2.MessageSendingResult()

    async def guard(
        event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext
    ) -> hook_pb2.BeforeToolCallResult | None:
        return None

    hooks = HookServer(plugin_id="typed")
    hooks.before_tool_call()(ends)  # type: ignore[arg-type]
    other = HookServer(plugin_id="typed-2")
    other.before_tool_call()(wrong_result)  # type: ignore[arg-type]
    third = HookServer(plugin_id="typed-3")
    assert third.before_tool_call()(guard) is guard  # the handler comes back unchanged


def test_every_hook_service_rpc_has_a_typed_decorator() -> None:
    service = hook_service_pb2.DESCRIPTOR.services_by_name["HookService"]
    annotations = typing.get_type_hints(HookServer)
    hooks = HookServer(plugin_id="p")
    for method in service.methods:
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in method.name).lstrip("_")
        event = method.input_type.fields_by_name["event"].message_type
        result_field = method.output_type.fields_by_name.get("result")
        result = None if result_field is None else result_field.message_type
        assert event is not None
        expected_event = getattr(hook_pb2, event.name)
        expected_result = type(None) if result is None else getattr(hook_pb2, result.name)
        assert typing.get_origin(annotations[name]) is HookDecorator, name
        assert typing.get_args(annotations[name]) == (expected_event, expected_result), name
        assert isinstance(getattr(hooks, name), HookDecorator), name
    assert len(service.methods) == 26
