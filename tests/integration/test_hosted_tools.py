"""Hosted tools (docs/protocol.md, "Hosted tools"): suspension with every hosted call exposed at once, submits
serialised by the actor, idempotent retries, deadlines that continue the run detached, validation at CreateSession, and
a suspended run that survives a restart and refuses to continue without a credential."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2

from general_agent.testing import FakeAnthropic, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of, sequences, text_of
from tests.support.rpc import (
    Stub,
    connect,
    create_session,
    get_session,
    rpc_error,
    stream_turn,
    text_input,
    watch_until_terminal,
)

LOOKUP_SCHEMA_JSON = (
    '{"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer","maximum":12345678901234567}},'
    '"required":["q"]}'
)


def lookup(name: str = "lookup", *, timeout: float | None = None, schema: str = LOOKUP_SCHEMA_JSON) -> Any:
    tool = hosted_tool_pb2.HostedToolDefinition(
        name=name, description=f"{name}: ask the host", input_schema_json=schema
    )
    if timeout is not None:
        tool.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout), nanos=int(timeout % 1 * 1e9)))
    return tool


def hosted_use(call_id: str, name: str = "lookup", **arguments: Any) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input=arguments or {"q": call_id})


async def hosted_session(stub: Stub, *tools: Any) -> str:
    session = await create_session(
        stub,
        identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING),
        hosted_tools=list(tools) or [lookup()],
    )
    return session.identity.session_id


async def submit(stub: Stub, sid: str, call_id: str, **result: Any) -> list[Any]:
    request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id=call_id, **result)
    return [r.event async for r in stub.SubmitHostedToolResult(request)]


SUSPENDED_ONE = ["run_started", "assistant_delta", "usage_snapshot", "tool_call", "hosted_tool_call", "run_finished"]
CONTINUED = ["turn_complete", "assistant_delta", "usage_snapshot", "turn_complete", "run_finished"]


async def suspend_on_one_call(stub: Stub, fake_model: FakeAnthropic, sid: str, call_id: str = "toolu_h1") -> list[Any]:
    fake_model.enqueue(Reply(blocks=[TextBlock("Asking the host."), hosted_use(call_id, q="weather", n=3)]))
    return await stream_turn(stub, sid, "what is the weather?")


async def test_one_hosted_call_suspends_the_run(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    events = await suspend_on_one_call(stub, fake_model, sid)
    assert kinds(events) == SUSPENDED_ONE
    assert "turn_complete" not in kinds(events)
    call = last_of(events, "tool_call")
    hosted = last_of(events, "hosted_tool_call")
    assert (hosted.call_id, hosted.tool_name) == ("toolu_h1", "lookup")
    assert hosted.input_json == call.input_json == '{"q":"weather","n":3}'
    assert dict(hosted.input) == {"q": "weather", "n": 3.0}
    assert hosted.HasField("deadline")
    assert hosted.deadline.seconds > events[0].create_time.seconds + 3600  # the server default: a day
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.stop_reason) == (event_pb2.RUN_OUTCOME_SUSPENDED, event_pb2.STOP_REASON_TOOL_USE)
    assert list(finished.pending_call_ids) == ["toolu_h1"]
    assert finished.usage.model_calls == 1
    session = await get_session(stub, sid)
    assert session.state == session_pb2.SESSION_STATE_SUSPENDED
    assert list(session.pending_call_ids) == ["toolu_h1"]
    assert session.active_run_id == events[0].run_id
    assert session.last_sequence == events[-1].sequence
    # The definition reached the model unchanged (the big integer survives: input_schema_json wins).
    tools = {t["name"]: t for t in fake_model.requests[0].tools}
    # The last tool definition carries the tools' prompt-cache breakpoint.
    assert {k: v for k, v in tools["lookup"].items() if k != "cache_control"} == {
        "name": "lookup",
        "description": "lookup: ask the host",
        "input_schema": json.loads(LOOKUP_SCHEMA_JSON),
    }
    assert tools["lookup"]["input_schema"]["properties"]["n"]["maximum"] == 12345678901234567
    assert len(fake_model.requests) == 1


@pytest.mark.parametrize(
    ("result", "kind", "model_content"),
    [
        ({"output_json": '{"temp": 21, "unit": "C"}'}, "tool_result", '{"temp": 21, "unit": "C"}'),
        ({"output": struct_pb2.Value(string_value="sunny, 21 C")}, "tool_result", "sunny, 21 C"),
        ({"output_json": '"a JSON string"'}, "tool_result", "a JSON string"),
        ({"error": "weather service down"}, "tool_error", "weather service down"),
    ],
)
async def test_submit_continues_the_run(
    stub: Stub, fake_model: FakeAnthropic, result: dict[str, Any], kind: str, model_content: str
) -> None:
    sid = await hosted_session(stub)
    suspended = await suspend_on_one_call(stub, fake_model, sid)
    fake_model.enqueue(TextReply("It is sunny."))
    events = await submit(stub, sid, "toolu_h1", **result)
    assert kinds(events) == [kind, *CONTINUED]
    assert all(e.run_id == suspended[0].run_id for e in events)  # the run keeps its id
    assert events[0].sequence > suspended[-1].sequence
    resolved = getattr(events[0], kind)
    assert (resolved.call_id, resolved.tool_name) == ("toolu_h1", "lookup")
    if kind == "tool_result":
        assert [p.text.text for p in resolved.output] == [model_content]
    else:
        assert resolved.error == model_content
    assert events[1].turn_complete.stop_reason == event_pb2.STOP_REASON_TOOL_USE
    assert text_of(events) == "It is sunny."
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.usage.model_calls) == (event_pb2.RUN_OUTCOME_COMPLETED, 2)
    messages = fake_model.requests[1].messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_h1",
        "name": "lookup",
        "input": {"q": "weather", "n": 3},
    }
    expected: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": "toolu_h1",
        "content": model_content,
        "cache_control": {"type": "ephemeral"},
    }
    if kind == "tool_error":
        expected["is_error"] = True
    assert messages[2]["content"] == [expected]
    session = await get_session(stub, sid)
    assert (session.state, list(session.pending_call_ids)) == (session_pb2.SESSION_STATE_IDLE, [])


async def test_submit_details_default_to_the_output(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    await suspend_on_one_call(stub, fake_model, sid)
    events = await submit(stub, sid, "toolu_h1", output_json='{"temp": 21}')
    assert json.loads(events[0].tool_result.details_json) == {"temp": 21}
    history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    results = [e.tool_result for e in history.entries if e.WhichOneof("entry") == "tool_result"]
    assert [(r.call_id, r.is_error, r.output[0].text.text) for r in results] == [("toolu_h1", False, '{"temp": 21}')]


async def test_parallel_hosted_calls_with_a_local_read(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(root)})
    async with connect(server.address) as stub:
        sid = await hosted_session(stub)
        workspace = root / "default" / sid
        workspace.mkdir(parents=True)
        (workspace / "local.txt").write_text("local data")
        fake_model.enqueue(
            Reply(
                blocks=[
                    hosted_use("toolu_1"),
                    ToolUseBlock(id="toolu_r", name="read", input={"path": "local.txt"}),
                    hosted_use("toolu_2"),
                    hosted_use("toolu_3"),
                ]
            )
        )
        events = await stream_turn(stub, sid, "do four things")
        assert kinds(events) == [
            "run_started",
            "usage_snapshot",
            "tool_call",
            "tool_call",
            "tool_call",
            "tool_call",
            "tool_result",
            "hosted_tool_call",
            "hosted_tool_call",
            "hosted_tool_call",
            "run_finished",
        ]
        assert [e.tool_call.call_id for e in events if e.WhichOneof("event") == "tool_call"] == [
            "toolu_1",
            "toolu_r",
            "toolu_2",
            "toolu_3",
        ]
        assert last_of(events, "tool_result").call_id == "toolu_r"
        hosted = [e.hosted_tool_call.call_id for e in events if e.WhichOneof("event") == "hosted_tool_call"]
        assert hosted == ["toolu_1", "toolu_2", "toolu_3"]
        assert list(last_of(events, "run_finished").pending_call_ids) == hosted

        # Submits in the order 3, 1, 2: only the last one continues the run.
        third = await submit(stub, sid, "toolu_3", output_json='"three"')
        assert kinds(third) == ["tool_result", "run_finished"]
        assert third[0].tool_result.call_id == "toolu_3"
        assert third[1].run_finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        assert list(third[1].run_finished.pending_call_ids) == ["toolu_1", "toolu_2"]
        assert list((await get_session(stub, sid)).pending_call_ids) == ["toolu_1", "toolu_2"]
        first = await submit(stub, sid, "toolu_1", error="one failed")
        assert kinds(first) == ["tool_error", "run_finished"]
        assert list(first[1].run_finished.pending_call_ids) == ["toolu_2"]
        assert len(fake_model.requests) == 1
        fake_model.enqueue(TextReply("all done"))
        second = await submit(stub, sid, "toolu_2", output_json='"two"')
        assert kinds(second) == ["tool_result", *CONTINUED]
        assert last_of(second, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert sequences(events + third + first + second) == sorted(set(sequences(events + third + first + second)))

        # All four results in ONE user message, in call order.
        messages = fake_model.requests[1].messages
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        blocks = messages[2]["content"]
        assert [(b["tool_use_id"], b["content"], b.get("is_error", False)) for b in blocks] == [
            ("toolu_1", "one failed", True),
            ("toolu_r", "     1\tlocal data", False),
            ("toolu_2", "two", False),
            ("toolu_3", "three", False),
        ]


async def test_unknown_call_id_is_not_found(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    await suspend_on_one_call(stub, fake_model, sid)
    error = await rpc_error(
        stub.SubmitHostedToolResult(turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="nope", error="x"))
    )
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOOL_CALL")
    # A call of another session is unknown too.
    other = await hosted_session(stub)
    error = await rpc_error(
        stub.SubmitHostedToolResult(
            turn_api.SubmitHostedToolResultRequest(session_id=other, call_id="toolu_h1", error="x")
        )
    )
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOOL_CALL")
    assert list((await get_session(stub, sid)).pending_call_ids) == ["toolu_h1"]


def _without_deltas(events: list[Any]) -> list[Any]:
    return [e for e in events if e.WhichOneof("event") != "assistant_delta"]


async def test_duplicate_submit_replays_and_a_different_payload_is_refused(
    stub: Stub, fake_model: FakeAnthropic
) -> None:
    sid = await hosted_session(stub)
    await suspend_on_one_call(stub, fake_model, sid)
    fake_model.enqueue(TextReply("Sunny today."))
    first = await submit(stub, sid, "toolu_h1", output_json='{"temp": 21}')
    again = await submit(stub, sid, "toolu_h1", output_json='{"temp": 21}')
    assert len(fake_model.requests) == 2  # the retry did not run anything
    assert kinds(again) == kinds(first)
    assert _without_deltas(again) == _without_deltas(first)  # same events, same sequences
    assert text_of(again) == text_of(first) == "Sunny today."
    conflicting: list[dict[str, Any]] = [{"output_json": '{"temp": 22}'}, {"error": "nope"}]
    for result in conflicting:
        error = await rpc_error(
            stub.SubmitHostedToolResult(
                turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_h1", **result)
            )
        )
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "TOOL_CALL_ALREADY_RESOLVED")
        assert error.metadata["resolved_by"] == "SUBMIT"
    assert (await get_session(stub, sid)).last_sequence == first[-1].sequence


async def test_duplicate_non_final_submit_replays_its_suspension(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub)
    fake_model.enqueue(Reply(blocks=[hosted_use("toolu_a"), hosted_use("toolu_b")]))
    await stream_turn(stub, sid, "two things")
    first = await submit(stub, sid, "toolu_a", output_json='"A"')
    again = await submit(stub, sid, "toolu_a", output_json='"A"')
    assert kinds(first) == ["tool_result", "run_finished"]
    assert again == first
    assert list((await get_session(stub, sid)).pending_call_ids) == ["toolu_b"]


async def test_hosted_timeout_continues_the_run_detached(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await hosted_session(stub, lookup(timeout=0.3))
    fake_model.enqueue(Reply(blocks=[hosted_use("toolu_slow", q="slow")]), TextReply("The host did not answer."))
    events = await stream_turn(stub, sid, "ask the slow host")
    finished = last_of(events, "run_finished")
    assert finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    deadline = last_of(events, "hosted_tool_call").deadline
    assert 300 <= deadline.ToMilliseconds() - events[0].create_time.ToMilliseconds() < 5000
    log = await watch_until_terminal(stub, sid, events[-1].sequence)
    assert kinds(log) == ["tool_error", *CONTINUED]
    assert all(e.run_id == events[0].run_id for e in log)
    error = log[0].tool_error
    assert (error.call_id, error.error) == ("toolu_slow", "hosted tool timed out")
    assert last_of(log, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    block = fake_model.requests[1].messages[2]["content"][0]
    assert (block["tool_use_id"], block["content"], block["is_error"]) == ("toolu_slow", "hosted tool timed out", True)
    late = await rpc_error(
        stub.SubmitHostedToolResult(
            turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_slow", output_json='"late"')
        )
    )
    assert (late.code, late.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "TOOL_CALL_ALREADY_RESOLVED")
    assert late.metadata["resolved_by"] == "TIMEOUT"
    session = await get_session(stub, sid)
    assert (session.state, session.last_sequence) == (session_pb2.SESSION_STATE_IDLE, log[-1].sequence)


@pytest.mark.parametrize(
    ("tools", "field", "message"),
    [
        ([lookup("read")], "session.hosted_tools[0].name", "reserved"),
        ([lookup("memory_x")], "session.hosted_tools[0].name", "reserved"),
        ([lookup("sessions_list")], "session.hosted_tools[0].name", "reserved"),
        ([lookup("alpha"), lookup("alpha")], "session.hosted_tools[1].name", "duplicate"),
        ([lookup("bad name!")], "session.hosted_tools[0].name", "must match"),
        ([lookup("x" * 65)], "session.hosted_tools[0].name", "must match"),
        ([lookup("ok", schema='{"type": "string"}')], "session.hosted_tools[0].input_schema", '"type": "object"'),
        ([lookup("ok", schema="{}")], "session.hosted_tools[0].input_schema", '"type": "object"'),
        (
            [lookup("ok", schema='{"type": "object", "properties": {"q": {"type": "nonsense"}}}')],
            "session.hosted_tools[0].input_schema",
            "not a valid JSON Schema",
        ),
        ([lookup("ok", schema="{not json")], "session.hosted_tools[0].input_schema_json", "not valid JSON"),
        ([lookup("ok", timeout=0.0)], "session.hosted_tools[0].timeout", "positive"),
    ],
)
async def test_hosted_definitions_are_validated(stub: Stub, tools: list[Any], field: str, message: str) -> None:
    error = await rpc_error(create_session(stub, hosted_tools=tools))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.field_violations[0][0] == field
    assert message in error.field_violations[0][1]
    listed = await stub.ListSessions(session_api.ListSessionsRequest())
    assert list(listed.sessions) == []


async def test_suspended_run_needs_a_key_after_a_restart(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    env = {"ANTHROPIC_API_KEY": ""}
    state = tmp_path / "state"
    first_server = await server_factory(env, state_dir=state)
    async with connect(first_server.address) as stub:
        session = await create_session(stub, hosted_tools=[lookup()], api_key="sk-ant-memory-only-1111")
        sid = session.identity.session_id
        suspended = await suspend_on_one_call(stub, fake_model, sid)
        assert last_of(suspended, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        assert fake_model.requests[0].api_key == "sk-ant-memory-only-1111"
    await first_server.stop(grace=1)

    second_server = await server_factory(env, state_dir=state)
    async with connect(second_server.address) as stub:
        before = await get_session(stub, sid)
        assert before.state == session_pb2.SESSION_STATE_SUSPENDED
        error = await rpc_error(
            stub.SubmitHostedToolResult(
                turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_h1", output_json='"21 C"')
            )
        )
        assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NO_API_KEY")
        after = await get_session(stub, sid)
        assert after.state == session_pb2.SESSION_STATE_SUSPENDED
        assert list(after.pending_call_ids) == ["toolu_h1"]
        assert after.last_sequence == before.last_sequence  # nothing written
        assert len(fake_model.requests) == 1

        await stub.ResumeSession(
            session_api.ResumeSessionRequest(
                session_id=sid, overrides=session_pb2.SessionOverrides(api_key="sk-ant-resumed-key-2222")
            )
        )
        fake_model.enqueue(TextReply("21 degrees."))
        events = await submit(stub, sid, "toolu_h1", output_json='"21 C"')
        assert kinds(events) == ["tool_result", *CONTINUED]
        assert all(e.run_id == suspended[0].run_id for e in events)
        assert events[0].sequence > suspended[-1].sequence
        assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        request = fake_model.requests[1]
        assert request.api_key == "sk-ant-resumed-key-2222"
        assert request.messages == [
            {"role": "user", "content": [{"type": "text", "text": "what is the weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Asking the host."},
                    {"type": "tool_use", "id": "toolu_h1", "name": "lookup", "input": {"q": "weather", "n": 3}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_h1",
                        "content": "21 C",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ]
        stored = second_server.sqlite_path.read_bytes()
        assert b"sk-ant-resumed-key-2222" not in stored
        assert b"sk-ant-memory-only-1111" not in stored


async def test_submit_before_the_suspension_commit_waits_for_it(
    server_factory: ServerFactory, server_root: Path, fake_model: FakeAnthropic
) -> None:
    """A submit that arrives before the suspension commit waits in the actor and applies after
    it. The host learns the call id from tool_call while a local command (waiting for a file) still blocks
    the round."""
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(server_root)})
    async with connect(server.address) as stub:
        sid = await hosted_session(stub)
        workspace = server_root / "default" / sid
        workspace.mkdir(parents=True)
        gate = workspace / "go"
        waiting = "while [ ! -e go ]; do sleep 0.01; done; echo piped data"
        fake_model.enqueue(
            Reply(blocks=[hosted_use("toolu_h"), ToolUseBlock(id="toolu_r", name="exec", input={"command": waiting})]),
            TextReply("done"),
        )
        turn = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("both")))
        try:
            seen = []
            async for response in turn:
                seen.append(response.event)
                if response.event.WhichOneof("event") == "tool_call" and response.event.tool_call.call_id == "toolu_r":
                    break
            early = asyncio.create_task(submit(stub, sid, "toolu_h", output_json='"early"'))
            actor = server.agent.cache.peek("default", sid)
            assert actor is not None
            for _ in range(1000):  # until the submit is inside the server (subscribed), or already answered
                if actor.ledger.subscriber_count >= 2 or early.done():
                    break
                await asyncio.sleep(0.005)
            gate.touch()
            events = seen + [r.event async for r in turn]
            submitted = await asyncio.wait_for(early, 10)
        finally:
            gate.touch()  # never leave the command waiting
        assert kinds(events) == [
            "run_started",
            "usage_snapshot",
            "tool_call",
            "tool_call",
            "tool_result",
            "hosted_tool_call",
            "run_finished",
        ]
        assert list(last_of(events, "run_finished").pending_call_ids) == ["toolu_h"]
        assert kinds(submitted) == ["tool_result", *CONTINUED]
        assert submitted[0].tool_result.call_id == "toolu_h"
        assert submitted[0].sequence > events[-1].sequence
        assert last_of(submitted, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        blocks = fake_model.requests[1].messages[2]["content"]
        assert [(b["tool_use_id"], b["content"]) for b in blocks] == [
            ("toolu_h", "early"),
            ("toolu_r", "piped data"),
        ]


@pytest.fixture
def server_root(tmp_path: Path) -> Path:
    return tmp_path / "ws"
