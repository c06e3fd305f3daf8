"""Hosted tools across real process crashes: suspend in one server process, SIGKILL it, submit the results
to a new process on the same state dir; the run continues with the original user message, the assistant
tool_use blocks and the results in one model request, nothing duplicated."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import RESULT_THEN_TEXT, kinds, last_of, sequences, text_of
from tests.support.rpc import connect, create_session, events_after, stream_turn
from tests.support.subprocess_server import ServerProcess, ServerProcesses

LOOKUP_SCHEMA = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


@pytest.fixture
def server(server_processes: ServerProcesses, tmp_path: Path) -> ServerProcess:
    """Not started: each test starts it, kills or stops it, and starts it again on the same state."""
    return server_processes.make(extra={"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})


@pytest.mark.parametrize("calls", [1, 3])
async def test_hosted_results_submitted_after_sigkill_continue_the_run(
    server: ServerProcess, fake_model_thread: FakeAnthropicThread, calls: int
) -> None:
    ids = [f"toolu_{i}" for i in range(calls)]
    fake_model_thread.enqueue(
        Reply(
            blocks=[TextBlock("Looking up."), *(ToolUseBlock(id=i, name="lookup", input={"q": i}) for i in ids)],
            stop_reason="tool_use",
        ),
        TextReply("All answers received."),
    )
    address = server.start()
    async with connect(address) as stub:
        session = await create_session(
            stub, hosted_tools=[hosted_tool_pb2.HostedToolDefinition(name="lookup", input_schema_json=LOOKUP_SCHEMA)]
        )
        sid = session.identity.session_id
        first = await stream_turn(stub, sid, "Look these up.")
        finished = last_of(first, "run_finished")
        assert finished.outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        assert list(finished.pending_call_ids) == ids
        assert [e.hosted_tool_call.call_id for e in first if e.WhichOneof("event") == "hosted_tool_call"] == ids
    server.kill()

    address = server.start()
    async with connect(address) as stub:
        state = (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
        assert state.state == session_pb2.SESSION_STATE_SUSPENDED
        assert list(state.pending_call_ids) == ids
        streams = []
        for call_id in reversed(ids):  # any order
            request = turn_api.SubmitHostedToolResultRequest(
                session_id=sid, call_id=call_id, output_json=f'"answer {call_id}"'
            )
            streams.append([r.event async for r in stub.SubmitHostedToolResult(request)])
        final = streams[-1]
        assert kinds(final) == RESULT_THEN_TEXT
        assert text_of(final) == "All answers received."
        assert last_of(final, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert final[0].run_id == first[0].run_id  # the run keeps its id across the suspension and restart
        for partial in streams[:-1]:
            assert kinds(partial) == ["tool_result", "run_finished"]
            assert last_of(partial, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        log = await events_after(stub, sid, 0, final[-1].sequence)
        assert sequences(log) == sorted(set(sequences(log)))
        assert [e.WhichOneof("event") for e in log].count("run_started") == 1
    assert len(fake_model_thread.requests) == 2  # nothing re-sent, nothing duplicated
    messages = fake_model_thread.requests[1].messages
    assert messages[0] == {"role": "user", "content": [{"type": "text", "text": "Look these up."}]}
    assert messages[1]["role"] == "assistant"
    assert [b["id"] for b in messages[1]["content"] if b["type"] == "tool_use"] == ids
    results = messages[2]["content"]
    assert len(messages) == 3
    assert [b["tool_use_id"] for b in results] == ids  # call order, whatever the submit order
    assert [b["content"] for b in results] == [f"answer {i}" for i in ids]


async def test_watcher_reattaches_after_a_server_restart_without_gap_or_duplicate(
    server: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    address = server.start()
    async with connect(address) as stub:
        sid = (await create_session(stub)).identity.session_id
        seen = []
        watch = stub.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=0))

        async def follow() -> None:
            async for response in watch:
                seen.append(response.event)
                if response.event.WhichOneof("event") == "run_finished":
                    return

        follower = asyncio.create_task(follow())
        fake_model_thread.enqueue(TextReply("first answer", chunks=["first ", "answer"]))
        await stream_turn(stub, sid, "one")
        await asyncio.wait_for(follower, 10)
        watch.cancel()
    cursor = seen[-1].sequence
    server.kill()

    address = server.start()
    async with connect(address) as stub:
        fake_model_thread.enqueue(TextReply("second answer"))
        second = await stream_turn(stub, sid, "two")
        resumed = await events_after(stub, sid, cursor, second[-1].sequence)
    combined = sequences(seen) + sequences(resumed)
    assert combined == sorted(set(combined))
    assert resumed[0].sequence > cursor
    assert text_of(seen) == "first answer"
    assert text_of(resumed) == "second answer"
    assert resumed[-1] == second[-1]


async def test_graceful_shutdown_keeps_a_suspended_run_suspended(
    server: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    fake_model_thread.enqueue(
        Reply(blocks=[ToolUseBlock(id="toolu_x", name="lookup", input={"q": "x"})], stop_reason="tool_use"),
        TextReply("finished after the restart"),
    )
    address = server.start()
    async with connect(address) as stub:
        session = await create_session(
            stub, hosted_tools=[hosted_tool_pb2.HostedToolDefinition(name="lookup", input_schema_json=LOOKUP_SCHEMA)]
        )
        sid = session.identity.session_id
        first = await stream_turn(stub, sid, "look it up")
        assert last_of(first, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    assert server.terminate(timeout=15) == 0
    address = server.start()
    async with connect(address) as stub:
        assert (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session.state == (
            session_pb2.SESSION_STATE_SUSPENDED
        )
        request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_x", output_json='"x is 42"')
        final = [r.event async for r in stub.SubmitHostedToolResult(request)]
    assert text_of(final) == "finished after the restart"
    assert last_of(final, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
