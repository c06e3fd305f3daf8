"""client.run() over RunSession against a real in-process server: hosted tools registered with @client.hosted_tool
(schemas from type hints and from a pydantic model), approvals through on_approval, typed events to match on, and a
connection cut mid-run by a loopback proxy, after which the run is followed again with no gap and no duplicate (for
run() over RunSession, and for stream_turn() over StreamTurn then WatchSession)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest

from general_agent import (
    AgentClient,
    ApprovalAnswer,
    ApprovalRequested,
    AssistantDelta,
    Event,
    HostedToolCall,
    RunFinished,
    RunStarted,
    SessionNotFound,
    ToolError,
    ToolResult,
)
from general_agent.events import outcome_name, text_of
from general_agent.testing import FakeAnthropic, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2
from general_agent_server.app import RunningServer
from tests.support.tcp_proxy import TcpProxy


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AgentClient]:
    async with await AgentClient.connect(server.address) as agent_client:
        yield agent_client


@pytest.fixture
async def proxy(server: RunningServer) -> AsyncIterator[TcpProxy]:
    tcp_proxy = TcpProxy(target=server.address)
    await tcp_proxy.start()
    yield tcp_proxy
    await tcp_proxy.stop()


def calls(*blocks: ToolUseBlock) -> Reply:
    return Reply(blocks=list(blocks))


def tool_results(fake_model: FakeAnthropic) -> list[dict[str, Any]]:
    last = fake_model.requests[-1].body["messages"][-1]
    return [block for block in last["content"] if block.get("type") == "tool_result"]


async def session_log(client: AgentClient, session_id: str, after: int) -> list[int]:
    """The sequences of the session's event log after `after`, up to its last event."""
    last = (await client.get_session(session_id)).last_sequence
    seen: list[int] = []
    async for event in client.watch(session_id, after_sequence=after):
        seen.append(event.sequence)
        if event.sequence >= last:
            return seen
    return seen


async def test_a_hosted_tool_from_type_hints_is_declared_and_answered(
    client: AgentClient, fake_model: FakeAnthropic
) -> None:
    received: list[tuple[str, int]] = []

    @client.hosted_tool("weather")
    async def weather(city: str, days: int = 1) -> str:
        """The forecast for a city."""
        received.append((city, days))
        return f"sunny in {city} for {days} day(s)"

    session = await client.create_session()
    [declared] = session.hosted_tools
    fake_model.enqueue(calls(ToolUseBlock(id="c1", name="weather", input={"city": "Paris"})), TextReply("Sunny."))

    result = await client.run(session.identity.session_id, "Weather in Paris?")

    assert (declared.name, declared.description) == ("weather", "The forecast for a city.")
    schema = json.loads(declared.input_schema_json)
    assert set(schema["properties"]) == {"city", "days"}
    assert list(schema["required"]) == ["city"]
    assert result.ok
    assert result.text == "Sunny."
    assert received == [("Paris", 1)]
    assert [r["content"] for r in tool_results(fake_model)] == ["sunny in Paris for 1 day(s)"]
    sequences = [event.sequence for event in result.events]
    assert sequences == sorted(set(sequences))
    assert isinstance(result.events[0], RunStarted)  # whether the turn's command_result comes before it or not
    assert [type(e).__name__ for e in result.events if isinstance(e, HostedToolCall | ToolResult)] == [
        "HostedToolCall",
        "ToolResult",
    ]


class Lookup(pydantic.BaseModel):
    word: str
    limit: int = 3


async def test_a_pydantic_model_handler_and_parallel_calls(client: AgentClient, fake_model: FakeAnthropic) -> None:
    @client.hosted_tool("lookup", description="Dictionary lookup.")
    async def lookup(query: Lookup) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"word": query.word, "senses": query.limit, "big": 2**60 + 1}

    @client.hosted_tool()
    async def explode(reason: str) -> str:
        raise RuntimeError(f"boom: {reason}")

    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(
        calls(
            ToolUseBlock(id="a", name="lookup", input={"word": "kayak"}),
            ToolUseBlock(id="b", name="explode", input={"reason": "test"}),
            ToolUseBlock(id="c", name="lookup", input={"word": 7}),  # refused by the declared schema
        ),
        TextReply("done"),
    )

    result = await client.run(sid, "three calls")

    assert result.ok
    by_id = {r["tool_use_id"]: r for r in tool_results(fake_model)}
    assert '"big":1152921504606846977' in str(by_id["a"]["content"])
    assert by_id["b"]["is_error"] is True
    assert "boom: test" in str(by_id["b"]["content"])
    assert by_id["c"]["is_error"] is True
    assert "word: 7 is not of type 'string'" in str(by_id["c"]["content"])
    errors = [e.call_id for e in result.events if isinstance(e, ToolError)]
    assert sorted(errors) == ["b", "c"]


async def test_approvals_go_to_on_approval(client: AgentClient, fake_model: FakeAnthropic) -> None:
    @client.hosted_tool("lookup")
    async def lookup(word: str) -> str:
        return f"{word}: a boat"

    asked: list[tuple[str, str]] = []

    async def on_approval(request: ApprovalRequested) -> ApprovalAnswer:
        asked.append((request.call_id, request.tool_name))
        if request.tool_name == "write":
            return ApprovalAnswer.deny("not this file")
        return ApprovalAnswer.approve()

    session = await client.create_session(mode="CODING", approval_policy=["write", "lookup"])
    fake_model.enqueue(
        calls(
            ToolUseBlock(id="w", name="write", input={"path": "a.txt", "content": "x"}),
            ToolUseBlock(id="l", name="lookup", input={"word": "kayak"}),
        ),
        TextReply("partly done"),
    )

    result = await client.run(session.identity.session_id, "write and look up", on_approval=on_approval)

    assert result.ok
    assert sorted(asked) == [("l", "lookup"), ("w", "write")]
    by_id = {r["tool_use_id"]: r for r in tool_results(fake_model)}
    assert by_id["w"]["is_error"] is True
    assert "not this file" in str(by_id["w"]["content"])
    assert by_id["l"]["content"] == "kayak: a boat"


async def test_a_call_nobody_here_answers_leaves_the_run_suspended(
    client: AgentClient, fake_model: FakeAnthropic
) -> None:
    sid = (await client.create_session(mode="CODING", approval_policy=["write"])).identity.session_id
    fake_model.enqueue(calls(ToolUseBlock(id="w", name="write", input={"path": "a", "content": "x"})), TextReply("ok"))

    result = await client.run(sid, "write")  # no on_approval

    assert result.outcome == "SUSPENDED"
    assert result.pending_call_ids == ("w",)
    assert (await client.approve(sid, "w")).text == "ok"  # the host answers later


async def test_events_match_by_class(client: AgentClient, fake_model: FakeAnthropic) -> None:
    sid = (await client.create_session()).identity.session_id
    fake_model.enqueue(TextReply("hello there", chunks=["hello ", "there"]))

    text: list[str] = []
    outcome = ""
    async for event in client.run(sid, "hi"):
        match event:
            case AssistantDelta(delta):
                text.append(delta)
            case RunFinished(outcome=finished_as):
                outcome = finished_as
            case _:
                assert event.kind  # every known event has its kind
    assert "".join(text) == "hello there"
    assert outcome == "COMPLETED"


async def test_a_dropped_connection_is_reattached_without_gap_or_duplicate(
    server: RunningServer, proxy: TcpProxy, fake_model: FakeAnthropic
) -> None:
    async with await AgentClient.connect(proxy_address(proxy)) as client:

        @client.hosted_tool("slow")
        async def slow(step: int) -> str:
            proxy.drop()  # the stream dies while this call is being answered
            return f"step {step} done"

        sid = (await client.create_session()).identity.session_id
        start = (await client.get_session(sid)).last_sequence
        hang = HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))
        fake_model.enqueue(calls(ToolUseBlock(id="s1", name="slow", input={"step": 1})), hang)
        events: list[Event] = []
        async for event in client.run(sid, "go"):
            events.append(event)
            if isinstance(event, AssistantDelta) and event.text == "partial ":
                proxy.drop()  # and again in the middle of the model's answer
                hang.release()

        log = await session_log(client, sid, start)

    assert proxy.connections >= 3
    assert [e.sequence for e in events] == log  # every event once, in order
    assert "".join(e.text for e in events if isinstance(e, AssistantDelta)) == "partial rest"
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.outcome == "COMPLETED"
    assert tool_results(fake_model)[0]["content"] == "step 1 done"


async def test_a_dropped_stream_turn_is_followed_with_watch_session_without_gap_or_duplicate(
    server: RunningServer, proxy: TcpProxy, fake_model: FakeAnthropic
) -> None:
    first = HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))
    second = HangReply(after_events=4, reply=TextReply("more talk", chunks=["more ", "talk"]))
    fake_model.enqueue(first, second)  # the second model call delivers the message injected meanwhile
    async with await AgentClient.connect(server.address) as direct, await AgentClient.connect(proxy.address) as client:
        sid = (await client.create_session()).identity.session_id
        start = (await client.get_session(sid)).last_sequence
        events: list[event_pb2.SessionEvent] = []
        async for event in client.stream_turn(sid, "go", on_disconnect="CONTINUE"):
            events.append(event)
            delta = event.assistant_delta.text if event.HasField("assistant_delta") else ""
            if delta == "partial ":
                proxy.drop()  # StreamTurn dies mid-answer; the run goes on
                assert await direct.inject(sid, "and one more thing") == event.run_id
                first.release()
            elif delta == "more ":
                proxy.drop()  # and the WatchSession that followed it up dies too
                second.release()

        log = await session_log(client, sid, start)

    assert proxy.connections >= 3
    assert [e.sequence for e in events] == log  # every event of the run once, in order, no gap
    assert {e.run_id for e in events} == {events[0].run_id}
    assert events[0].HasField("run_started")
    assert text_of(events) == "partial restmore talk"
    assert outcome_name(events[-1]) == "COMPLETED"


async def test_an_answer_of_the_service_is_raised_not_followed_up(proxy: TcpProxy) -> None:
    async with await AgentClient.connect(proxy.address) as client:
        with pytest.raises(SessionNotFound):
            await anext(client.stream_turn("no-such-session", "hi", on_disconnect="CONTINUE"))
    assert proxy.connections == 1


def proxy_address(proxy: TcpProxy) -> str:
    assert proxy.address
    return proxy.address
