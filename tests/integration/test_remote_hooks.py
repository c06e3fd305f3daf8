"""Remote hooks through EmitHook: the server dials a host's HookService (a real grpc.aio server on port
0), merges results with the runner's rules, treats UNIMPLEMENTED as no opinion, fails before_tool_call
closed when the host is down, and keeps registrations across a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, json_format, struct_pb2

from general_agent.v1 import (
    hook_pb2,
    hook_registration_pb2,
    hook_service_pb2,
    hook_service_pb2_grpc,
    hosted_tool_pb2,
)
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.rpc import Stub, connect, create_session, rpc_error

# The generated base class answers UNIMPLEMENTED for every hook not overridden; its stub declares them all
# abstract, so mypy is told it is Any.
_HookServiceBase: Any = hook_service_pb2_grpc.HookServiceServicer


class Host(_HookServiceBase):  # type: ignore[misc]
    """A host serving message_sending and before_tool_call; everything else is UNIMPLEMENTED."""

    def __init__(self, content: str, *, cancel: bool = False, block: bool = False) -> None:
        self.content = content
        self.cancel = cancel
        self.block = block
        self.seen: list[str] = []

    async def MessageSending(
        self, request: hook_service_pb2.MessageSendingRequest, context: Any
    ) -> hook_service_pb2.MessageSendingResponse:
        self.seen.append(f"message_sending:{request.event.content}:{request.context.plugin_id}")
        result = hook_pb2.MessageSendingResult(content=self.content, cancel=self.cancel)
        return hook_service_pb2.MessageSendingResponse(result=result)

    async def BeforeToolCall(
        self, request: hook_service_pb2.BeforeToolCallRequest, context: Any
    ) -> hook_service_pb2.BeforeToolCallResponse:
        self.seen.append(f"before_tool_call:{request.event.tool_name}")
        result = hook_pb2.BeforeToolCallResult(block=self.block, block_reason="writes are not allowed")
        return hook_service_pb2.BeforeToolCallResponse(result=result)


async def serve(host: Host) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    hook_service_pb2_grpc.add_HookServiceServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def serve_and_register(stub: Stub, hosts: list[grpc.aio.Server], host: Any, plugin: str, *names: str) -> None:
    """Serves `host` on port 0 and registers it for the given hooks."""
    server, address = await serve(host)
    hosts.append(server)
    await stub.RegisterHooks(
        hook_registration_pb2.RegisterHooksRequest(registration=registration(plugin, address, *names))
    )


# Hook hosts listen on loopback, which the SSRF guard refuses unless allow-listed.
ALLOW_LOOPBACK = {"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1"}


@pytest.fixture
async def server(server_factory: ServerFactory) -> RunningServer:
    return await server_factory(ALLOW_LOOPBACK)


def registration(plugin: str, address: str, *names: str, priority: int = 0, timeout: float = 2.0) -> Any:
    return hook_registration_pb2.HookRegistration(
        plugin_id=plugin,
        target=hook_registration_pb2.HookTarget(address=address),
        hooks=[
            hook_registration_pb2.HookBinding(
                name=hook_registration_pb2.HookName.Value(f"HOOK_NAME_{n.upper()}"),
                priority=priority,
                timeout=duration_pb2.Duration(seconds=int(timeout), nanos=int((timeout % 1) * 1e9)),
            )
            for n in names
        ],
    )


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


async def emit(stub: Stub, hook: str, event: dict[str, Any], **kwargs: Any) -> hook_registration_pb2.EmitHookResponse:
    response: hook_registration_pb2.EmitHookResponse = await stub.EmitHook(
        hook_registration_pb2.EmitHookRequest(hook_name=hook, event=struct(event), **kwargs)
    )
    return response


async def test_emit_merges_remote_results_by_priority(stub: Stub, hosts: list[grpc.aio.Server]) -> None:
    first, second = Host("first"), Host("second", cancel=True)
    third = Host("third")
    for plugin, host, priority in (("a", first, 30), ("b", second, 20), ("c", third, 10)):
        server, address = await serve(host)
        hosts.append(server)
        await stub.RegisterHooks(
            hook_registration_pb2.RegisterHooksRequest(
                registration=registration(plugin, address, "message_sending", priority=priority)
            )
        )
    response = await emit(stub, "message_sending", {"to": "chan", "content": "hello"})
    assert json_format.MessageToDict(response.result) == {"content": "second", "cancel": True}
    assert response.handler_count == 2  # cancel is sticky and stops the chain
    assert first.seen == ["message_sending:hello:a"]
    assert third.seen == []
    listed = await stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
    assert sorted(r.plugin_id for r in listed.registrations) == ["a", "b", "c"]
    assert (await stub.UnregisterHooks(hook_registration_pb2.UnregisterHooksRequest(plugin_id="b"))).removed is True
    response = await emit(stub, "message_sending", {"to": "chan", "content": "hello"})
    assert json_format.MessageToDict(response.result) == {"content": "third"}


async def test_unimplemented_is_no_opinion_and_a_down_host_fails_before_tool_call_closed(
    stub: Stub, hosts: list[grpc.aio.Server]
) -> None:
    host = Host("x")
    server, address = await serve(host)
    hosts.append(server)
    await stub.RegisterHooks(
        hook_registration_pb2.RegisterHooksRequest(registration=registration("p", address, "before_prompt_build"))
    )
    response = await emit(stub, "before_prompt_build", {"prompt": "hi"})
    assert not response.HasField("result")
    assert response.handler_count == 1
    assert list(response.handler_errors) == []
    await stub.RegisterHooks(
        hook_registration_pb2.RegisterHooksRequest(
            registration=registration("down", "127.0.0.1:1", "before_tool_call", timeout=1.0)
        )
    )
    blocked = await emit(stub, "before_tool_call", {"toolName": "write", "params": {"path": "a"}})
    result = json_format.MessageToDict(blocked.result)
    assert result["block"] is True
    assert "down" in result["blockReason"]
    assert [e.plugin_id for e in blocked.handler_errors] == ["down"]
    await stub.RegisterHooks(
        hook_registration_pb2.RegisterHooksRequest(
            registration=registration("down2", "127.0.0.1:1", "message_sending", timeout=1.0)
        )
    )
    opened = await emit(stub, "message_sending", {"to": "x", "content": "y"})
    assert not opened.HasField("result")  # every other hook fails open


async def test_invalid_hooks_are_rejected(stub: Stub) -> None:
    error = await rpc_error(stub.EmitHook(hook_registration_pb2.EmitHookRequest(hook_name="not_a_hook")))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_HOOK")
    error = await rpc_error(
        stub.RegisterHooks(
            hook_registration_pb2.RegisterHooksRequest(registration=registration("p", "no-port", "message_sending"))
        )
    )
    assert (error.reason, error.field_violations[0][0]) == ("INVALID_HOOK", "registration.target.address")
    error = await rpc_error(
        stub.RegisterHooks(hook_registration_pb2.RegisterHooksRequest(registration=registration("p", "h:1")))
    )
    assert error.field_violations[0][0] == "registration.hooks"
    error = await rpc_error(
        stub.EmitHook(hook_registration_pb2.EmitHookRequest(hook_name="message_sending", session_id="missing"))
    )
    assert error.reason == "SESSION_NOT_FOUND"
    session = await create_session(stub)
    ok = await stub.EmitHook(
        hook_registration_pb2.EmitHookRequest(hook_name="gateway_start", session_id=session.identity.session_id)
    )
    assert ok.handler_count == 0


async def test_registrations_survive_a_restart(
    server_factory: ServerFactory, tmp_path: Path, hosts: list[grpc.aio.Server]
) -> None:
    state = tmp_path / "hooks-state"
    host = Host("persisted")
    hook_server, address = await serve(host)
    hosts.append(hook_server)
    first = await server_factory(ALLOW_LOOPBACK, state_dir=state)
    async with connect(first.address) as stub:
        await stub.RegisterHooks(
            hook_registration_pb2.RegisterHooksRequest(registration=registration("keep", address, "message_sending"))
        )
    await first.stop(grace=1.0)
    second = await server_factory(ALLOW_LOOPBACK, state_dir=state)
    async with connect(second.address) as stub:
        response = await emit(stub, "message_sending", {"to": "x", "content": "y"})
        assert json_format.MessageToDict(response.result) == {"content": "persisted"}
        listed = await stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
        assert [r.plugin_id for r in listed.registrations] == ["keep"]
        assert listed.registrations[0].tenant == "default"


class PromptHost(_HookServiceBase):  # type: ignore[misc]
    """Injects prompt context, overrides the model and blocks or rewrites tool calls."""

    def __init__(self, *, block_tools: frozenset[str] = frozenset(), rewrite: dict[str, Any] | None = None) -> None:
        self.block_tools = block_tools
        self.rewrite = rewrite
        self.order: list[str] = []
        self.request_ids: list[str] = []

    async def BeforeModelResolve(self, request: Any, context: Any) -> hook_service_pb2.BeforeModelResolveResponse:
        self.order.append("before_model_resolve")
        self.request_ids.extend(v for k, v in context.invocation_metadata() if k == "x-request-id")
        return hook_service_pb2.BeforeModelResolveResponse(
            result=hook_pb2.BeforeModelResolveResult(model_override="claude-opus-4-6")
        )

    async def BeforePromptBuild(self, request: Any, context: Any) -> hook_service_pb2.BeforePromptBuildResponse:
        self.order.append(f"before_prompt_build:{request.event.prompt}")
        return hook_service_pb2.BeforePromptBuildResponse(
            result=hook_pb2.BeforePromptBuildResult(
                prepend_context="Remember: the user likes tea.",
                prepend_system_context="[policy]",
                append_system_context="[suffix]",
            )
        )

    async def BeforeToolCall(self, request: Any, context: Any) -> hook_service_pb2.BeforeToolCallResponse:
        self.order.append(f"before_tool_call:{request.event.tool_name}")
        result = hook_pb2.BeforeToolCallResult()
        if request.event.tool_name in self.block_tools:
            result.block = True
            result.block_reason = f"{request.event.tool_name} is blocked here"
        elif self.rewrite is not None:
            result.params.update(self.rewrite)
        return hook_service_pb2.BeforeToolCallResponse(result=result)


async def test_prompt_hooks_shape_what_the_model_receives(
    stub: Stub, fake_model: Any, hosts: list[grpc.aio.Server]
) -> None:
    from general_agent.testing import TextReply

    host = PromptHost()
    await serve_and_register(stub, hosts, host, "prompt", "before_model_resolve", "before_prompt_build")
    session = await create_session(stub, system_prompt="You are helpful.")
    fake_model.enqueue(TextReply("ok"))
    from tests.support.rpc import text_input

    request_message = turn_api.StreamTurnRequest(
        session_id=session.identity.session_id, input=text_input("What should I drink?")
    )
    [r async for r in stub.StreamTurn(request_message, metadata=(("x-request-id", "trace-4711"),))]
    # The host sees the id of the request that started the run (trace context for its logs).
    assert host.request_ids == ["trace-4711"]
    request = fake_model.requests[-1]
    assert request.model == "claude-opus-4-6"
    assert request.system_text == "[policy]\n\nYou are helpful.\n\n[suffix]"
    assert request.messages[0]["content"][0]["text"] == "Remember: the user likes tea.\n\nWhat should I drink?"
    assert host.order == ["before_model_resolve", "before_prompt_build:What should I drink?"]
    # The transcript keeps the user's original words.
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=session.identity.session_id))
    assert history.entries[1].message.content[0].text.text == "What should I drink?"


async def test_before_tool_call_blocks_and_rewrites(
    stub: Stub, fake_model: Any, hosts: list[grpc.aio.Server], tmp_path: Path
) -> None:
    from general_agent.testing import Reply, TextReply, ToolUseBlock
    from tests.support.events import kinds, last_of
    from tests.support.rpc import stream_turn

    host = PromptHost(block_tools=frozenset({"read"}))
    await serve_and_register(stub, hosts, host, "guard", "before_tool_call")
    session = await create_session(stub)
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="t1", name="read", input={"path": "secret.txt"})], stop_reason="tool_use"),
        TextReply("understood"),
    )
    events = await stream_turn(stub, session.identity.session_id, "read my secret")
    assert kinds(events)[:5] == ["run_started", "usage_snapshot", "tool_call", "tool_error", "turn_complete"]
    assert last_of(events, "tool_error").error == "read is blocked here"
    assert fake_model.requests[-1].messages[-1]["content"][0]["is_error"] is True
    assert host.order == ["before_tool_call:read"]


async def test_before_tool_call_rewrites_params_and_tool_call_shows_the_final_input(
    stub: Stub, fake_model: Any, hosts: list[grpc.aio.Server]
) -> None:
    from general_agent.testing import Reply, TextReply, ToolUseBlock
    from tests.support.events import last_of
    from tests.support.rpc import stream_turn

    host = PromptHost(rewrite={"path": "allowed.txt"})
    await serve_and_register(stub, hosts, host, "rewriter", "before_tool_call")
    session = await create_session(stub)
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="t1", name="read", input={"path": "forbidden.txt"})], stop_reason="tool_use"),
        TextReply("done"),
    )
    events = await stream_turn(stub, session.identity.session_id, "read it")
    call = last_of(events, "tool_call")
    assert call.input_json == '{"path":"allowed.txt"}'
    # The rewritten call ran: the file does not exist, so the error names the rewritten path.
    assert last_of(events, "tool_error").error == "File not found: allowed.txt"


async def test_prompt_hook_decisions_hold_across_a_hosted_suspension(
    stub: Stub, fake_model: Any, hosts: list[grpc.aio.Server]
) -> None:
    from general_agent.testing import Reply, TextReply, ToolUseBlock
    from tests.support.rpc import stream_turn

    host = PromptHost()
    await serve_and_register(stub, hosts, host, "prompt", "before_model_resolve", "before_prompt_build")
    session = await create_session(
        stub, system_prompt="Base.", hosted_tools=[hosted_tool_pb2.HostedToolDefinition(name="lookup")]
    )
    sid = session.identity.session_id
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="h1", name="lookup", input={})], stop_reason="tool_use"), TextReply("done")
    )
    await stream_turn(stub, sid, "look")
    request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="h1", output_json='"found"')
    [r async for r in stub.SubmitHostedToolResult(request)]
    first, second = fake_model.requests[-2], fake_model.requests[-1]
    assert first.model == second.model == "claude-opus-4-6"
    assert first.system_text == second.system_text == "[policy]\n\nBase.\n\n[suffix]"
    assert second.messages[0]["content"][0]["text"].startswith("Remember: the user likes tea.")
    assert host.order.count("before_model_resolve") == 1  # asked once per run


async def test_a_blocked_hosted_call_is_a_tool_error_without_suspension(
    stub: Stub, fake_model: Any, hosts: list[grpc.aio.Server]
) -> None:
    from general_agent.testing import Reply, TextReply, ToolUseBlock
    from general_agent.v1 import event_pb2
    from tests.support.events import kinds, last_of
    from tests.support.rpc import stream_turn

    host = PromptHost(block_tools=frozenset({"lookup"}))
    await serve_and_register(stub, hosts, host, "guard", "before_tool_call")
    lookup = hosted_tool_pb2.HostedToolDefinition(
        name="lookup", description="Ask the host", input_schema_json='{"type":"object","properties":{}}'
    )
    session = await create_session(stub, hosted_tools=[lookup])
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="h1", name="lookup", input={})], stop_reason="tool_use"), TextReply("fine")
    )
    events = await stream_turn(stub, session.identity.session_id, "look it up")
    assert "hosted_tool_call" not in kinds(events)
    assert last_of(events, "tool_error").error == "lookup is blocked here"
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert host.order == ["before_tool_call:lookup"]
