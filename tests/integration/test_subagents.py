"""The `subagents` tool through real turns (docs/tools.md, subagents): a child session with its own
instructions, model and tools runs to completion and its final text returns to the parent; the subagent
hooks fire in order; the child is listed only when asked; a stopped parent stops its child."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import (
    event_pb2,
    hook_pb2,
    hook_registration_pb2,
    hook_service_pb2,
    hook_service_pb2_grpc,
    session_pb2,
)
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of
from tests.support.rpc import Stub, create_session, events_after, read_until, stream_turn, text_input

ALLOW_LOOPBACK = {"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1"}
_HookServiceBase: Any = hook_service_pb2_grpc.HookServiceServicer


@pytest.fixture
async def server(server_factory: ServerFactory) -> RunningServer:
    return await server_factory(ALLOW_LOOPBACK)


def spawn(call_id: str, **arguments: Any) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name="subagents", input=arguments)])


async def new_session(stub: Stub, **fields: Any) -> str:
    session = await create_session(stub, system_prompt="You are the parent.", **fields)
    return session.identity.session_id


async def test_subagent_round_trip(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await new_session(stub)
    fake_model.enqueue(
        spawn(
            "toolu_s1",
            instructions="You are a summariser.",
            task="Summarise: the sky is blue.",
            label="summariser",
            modelRef="anthropic/claude-haiku-4-5",
            allowedTools=["read"],
        ),
        TextReply("The sky is blue."),
        TextReply("The subagent says the sky is blue."),
    )
    events = await stream_turn(stub, sid, "delegate it")
    assert kinds(events)[-1] == "run_finished"
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    result = last_of(events, "tool_result")
    assert (result.tool_name, result.is_error) == ("subagents", False)
    assert result.output[0].text.text == "The sky is blue."
    child_id = result.details.struct_value["childSessionId"]
    assert child_id.startswith(f"{sid}:sub:")
    assert result.details.struct_value["ok"] is True

    parent_request, child_request, parent_again = fake_model.requests
    assert "subagents" in [t["name"] for t in parent_request.tools]
    assert child_request.system_text == "You are a summariser."
    assert child_request.model == "claude-haiku-4-5"
    assert [t["name"] for t in child_request.tools] == ["read"]
    assert child_request.messages[0]["content"][0]["text"] == "Summarise: the sky is blue."
    assert parent_again.messages[-1]["content"][0]["content"] == "The sky is blue."

    # The child is a stored session of the parent, listed only when asked.
    listed = await stub.ListSessions(session_api.ListSessionsRequest())
    assert [s.identity.session_id for s in listed.sessions] == [sid]
    children = await stub.ListSessions(session_api.ListSessionsRequest(parent_session_id=sid))
    assert [(s.identity.session_id, s.parent_session_id) for s in children.sessions] == [(child_id, sid)]
    everything = await stub.ListSessions(session_api.ListSessionsRequest(include_children=True))
    assert sorted(s.identity.session_id for s in everything.sessions) == sorted([sid, child_id])

    # Deleting the parent deletes its children.
    assert (await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))).deleted
    remaining = await stub.ListSessions(session_api.ListSessionsRequest(include_children=True))
    assert list(remaining.sessions) == []


async def test_a_child_gets_no_subagents_tool_and_unknown_tools_are_refused(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = await new_session(stub)
    fake_model.enqueue(
        spawn("toolu_s1", instructions="i", task="t", allowedTools=["read", "exec"]),
        TextReply("ok"),
    )
    events = await stream_turn(stub, sid, "delegate")
    error = last_of(events, "tool_error")
    assert error.tool_name == "subagents"
    assert error.error == "Subagent failed: tools not available to a subagent: exec"  # GENERAL mode has no exec
    fake_model.enqueue(spawn("toolu_s2", instructions="i", task="t"), TextReply("child"), TextReply("done"))
    await stream_turn(stub, sid, "again")
    child_tools = [t["name"] for t in fake_model.requests[-2].tools]
    assert "subagents" not in child_tools
    assert "read" in child_tools


async def test_a_failed_child_run_is_a_tool_error(stub: Stub, fake_model: FakeAnthropic) -> None:
    from general_agent.testing import ErrorReply

    sid = await new_session(stub)
    fake_model.enqueue(
        spawn("toolu_s1", instructions="i", task="t"),
        ErrorReply(400, message="bad child request"),
        TextReply("the subagent failed"),
    )
    events = await stream_turn(stub, sid, "delegate")
    error = last_of(events, "tool_error")
    assert error.error.startswith("Subagent failed: ")
    assert "bad child request" in error.error
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


async def test_stopping_the_parent_stops_the_child(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await new_session(stub)
    hang = HangReply(after_events=2, reply=TextReply("never"))
    fake_model.enqueue(spawn("toolu_s1", instructions="i", task="t"), hang)
    call = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("delegate")))
    seen = await read_until(call, "tool_call")
    await fake_model.wait_for_requests(2)
    children = await stub.ListSessions(session_api.ListSessionsRequest(parent_session_id=sid))
    (child,) = children.sessions
    stop = await stub.RequestStop(turn_api.RequestStopRequest(session_id=sid))
    assert stop.run_id
    rest = [response.event async for response in call]
    finished = last_of(seen + rest, "run_finished")
    assert finished.outcome == event_pb2.RUN_OUTCOME_STOPPED
    # The child's run ended too (stopped, not left running), and its model request was dropped.
    child_session = (await stub.GetSession(session_api.GetSessionRequest(session_id=child.identity.session_id))).session
    assert child_session.state == session_pb2.SESSION_STATE_IDLE
    child_events = await events_after(stub, child.identity.session_id, 0, child_session.last_sequence)
    assert last_of(child_events, "run_finished").outcome == event_pb2.RUN_OUTCOME_STOPPED
    assert fake_model.requests[1].disconnected


class SubagentHooks(_HookServiceBase):  # type: ignore[misc]
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.seen: list[str] = []

    async def SubagentSpawning(self, request: Any, context: Any) -> Any:
        self.seen.append(f"subagent_spawning:{request.event.agent_id}")
        result = hook_pb2.SubagentSpawningResult(
            status=hook_pb2.SUBAGENT_SPAWNING_STATUS_ERROR if self.refuse else hook_pb2.SUBAGENT_SPAWNING_STATUS_OK,
            error="no subagents today" if self.refuse else "",
        )
        return hook_service_pb2.SubagentSpawningResponse(result=result)

    async def SubagentDeliveryTarget(self, request: Any, context: Any) -> Any:
        self.seen.append("subagent_delivery_target")
        return hook_service_pb2.SubagentDeliveryTargetResponse()

    async def SubagentSpawned(self, request: Any, context: Any) -> Any:
        self.seen.append(f"subagent_spawned:{request.event.run_id != ''}")
        return hook_service_pb2.SubagentSpawnedResponse()

    async def SubagentEnded(self, request: Any, context: Any) -> Any:
        self.seen.append(f"subagent_ended:{request.event.reason}:{request.event.outcome}")
        return hook_service_pb2.SubagentEndedResponse()


@pytest.fixture
async def hook_host() -> AsyncIterator[tuple[SubagentHooks, str, grpc.aio.Server]]:
    host = SubagentHooks()
    server = grpc.aio.server()
    hook_service_pb2_grpc.add_HookServiceServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield host, f"127.0.0.1:{port}", server
    await server.stop(None)


async def register(stub: Stub, address: str) -> None:
    names = ("subagent_spawning", "subagent_delivery_target", "subagent_spawned", "subagent_ended")
    await stub.RegisterHooks(
        hook_registration_pb2.RegisterHooksRequest(
            registration=hook_registration_pb2.HookRegistration(
                plugin_id="sub-hooks",
                target=hook_registration_pb2.HookTarget(address=address),
                hooks=[
                    hook_registration_pb2.HookBinding(
                        name=hook_registration_pb2.HookName.Value(f"HOOK_NAME_{n.upper()}")
                    )
                    for n in names
                ],
            )
        )
    )


async def test_subagent_hooks_fire_in_order(
    stub: Stub, fake_model: FakeAnthropic, hook_host: tuple[SubagentHooks, str, grpc.aio.Server]
) -> None:
    host, address, _ = hook_host
    await register(stub, address)
    sid = await new_session(stub)
    fake_model.enqueue(spawn("toolu_s1", instructions="i", task="t", label="helper"), TextReply("c"), TextReply("p"))
    await stream_turn(stub, sid, "delegate")
    for _ in range(1000):
        if len(host.seen) == 4:
            break
        await asyncio.sleep(0.005)
    assert host.seen == [
        "subagent_spawning:helper",
        "subagent_delivery_target",
        "subagent_spawned:True",
        "subagent_ended:completed:ok",
    ]


async def test_a_spawning_hook_can_refuse(
    stub: Stub, fake_model: FakeAnthropic, hook_host: tuple[SubagentHooks, str, grpc.aio.Server]
) -> None:
    host, address, _ = hook_host
    host.refuse = True
    await register(stub, address)
    sid = await new_session(stub)
    fake_model.enqueue(spawn("toolu_s1", instructions="i", task="t"), TextReply("refused"))
    events = await stream_turn(stub, sid, "delegate")
    assert last_of(events, "tool_error").error == "Subagent failed: no subagents today"
    assert len(fake_model.requests) == 2  # no child request was made
    assert host.seen == ["subagent_spawning:subagent"]
    children = await stub.ListSessions(session_api.ListSessionsRequest(parent_session_id=sid))
    assert list(children.sessions) == []
