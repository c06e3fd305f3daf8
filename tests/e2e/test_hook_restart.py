"""Hook registrations survive a real restart of the server process (docs/hooks.md: registrations persist): a
tenant-wide and a per-session registration made before a SIGKILL still block a tool afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import (
    hook_pb2,
    hook_registration_pb2,
    hook_service_pb2,
    hook_service_pb2_grpc,
    session_pb2,
)
from general_agent.v1 import session_messages_pb2 as session_api
from tests.support.events import last_of
from tests.support.rpc import connect, stream_turn
from tests.support.subprocess_server import ServerProcesses

_HookServiceBase: Any = hook_service_pb2_grpc.HookServiceServicer


class BlockingHost(_HookServiceBase):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def BeforeToolCall(self, request: Any, context: Any) -> Any:
        self.calls.append((request.context.plugin_id, request.event.tool_name))
        return hook_service_pb2.BeforeToolCallResponse(
            result=hook_pb2.BeforeToolCallResult(block=True, block_reason=f"blocked by {request.context.plugin_id}")
        )


@pytest.fixture
async def host() -> AsyncIterator[tuple[BlockingHost, str]]:
    servicer = BlockingHost()
    server = grpc.aio.server()
    hook_service_pb2_grpc.add_HookServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(None)


def registration(plugin: str, address: str) -> hook_registration_pb2.HookRegistration:
    return hook_registration_pb2.HookRegistration(
        plugin_id=plugin,
        target=hook_registration_pb2.HookTarget(address=address),
        hooks=[hook_registration_pb2.HookBinding(name=hook_registration_pb2.HOOK_NAME_BEFORE_TOOL_CALL)],
    )


def read_call(call_id: str) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name="read", input={"path": "x.txt"})])


async def test_registrations_survive_a_sigkill(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread, host: tuple[BlockingHost, str]
) -> None:
    servicer, address = host
    server_process = server_processes.make(extra={"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1"})
    before = server_process.start()
    async with connect(before) as stub:
        await stub.RegisterHooks(
            hook_registration_pb2.RegisterHooksRequest(registration=registration("tenant-wide", address))
        )
        created = await stub.CreateSession(
            session_api.CreateSessionRequest(
                session=session_pb2.Session(hook_registrations=[registration("per-session", address)])
            )
        )
        sid = created.session.identity.session_id
    server_process.kill()  # no shutdown path runs

    after = server_process.start()
    fake_model_thread.enqueue(read_call("toolu_1"), TextReply("blocked"))
    async with connect(after) as stub:
        listed = await stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest())
        assert [r.plugin_id for r in listed.registrations] == ["tenant-wide"]
        scoped = await stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest(session_id=sid))
        assert [r.plugin_id for r in scoped.registrations] == ["per-session"]
        events = await stream_turn(stub, sid, "read x.txt")
    error = last_of(events, "tool_error")
    # Both default to priority 0: the older (tenant-wide) registration runs first and its block is sticky.
    assert error.error == "blocked by tenant-wide"
    assert servicer.calls == [("tenant-wide", "read")]
