"""Hook firing points through real turns (docs/hooks.md, "Order" and "Kinds and merge rules"): the order of
one turn's hooks with their dispatch_seq, the typed payloads, the write-path hooks shaping the transcript
but not the model history, and timeouts and failures under both failure policies."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from general_agent.testing import ErrorReply, FakeAnthropic, Reply, TextBlock, TextReply, ToolUseBlock, Usage
from general_agent.v1 import content_pb2, event_pb2, hook_pb2, hook_registration_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.hook_agent import Agent, as_dict, open_agent
from tests.support.hook_host import (
    SDK_NATIVE_HOOKS,
    Answer,
    HookCall,
    ServicerContext,
    aborting,
    binding,
    returning,
    sleeping,
    wait_until,
)
from tests.support.rpc import create_session, stream_turn, text_input

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
async def agent(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Agent]:
    async with open_agent(server_factory, tmp_path) as value:
        yield value


def entry_kind(call: HookCall) -> str:
    """The kind of transcript entry a write-path call carries: a toolResult message, or an export line."""
    message = as_dict(call.request.event.message)
    return "tool_result" if message.get("role") == "toolResult" else str(message["type"])


def label(call: HookCall) -> str:
    return f"before_message_write:{entry_kind(call)}" if call.hook == "before_message_write" else call.hook


def read_call(call_id: str, path: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="read", input={"path": path})


def image_input(text: str) -> list[content_pb2.ContentPart]:
    return [
        content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type="image/png", data=PNG)),
        *text_input(text),
    ]


# ---------------------------------------------------------------------- order


ONE_TOOL_TURN = [
    "session_start",
    "before_message_write:system_prompt",
    "before_message_write:message",
    "before_model_resolve",
    "before_agent_start",
    "before_prompt_build",
    "llm_input",
    "before_message_write:assistant",
    "before_tool_call",
    "before_message_write:tool_call",
    "after_tool_call",
    "tool_result_persist",
    "before_message_write:tool_result",
    "before_message_write:assistant",
    "agent_end",
    "llm_output",
]


async def test_hooks_of_a_turn_with_one_local_tool_follow_the_pipeline_order(
    agent: Agent, fake_model: FakeAnthropic
) -> None:
    host = await agent.host()
    await agent.register("observer", host.address, SDK_NATIVE_HOOKS)
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    (agent.workspace(sid) / "notes.txt").write_text("buy milk\n")
    fake_model.enqueue(
        Reply(blocks=[TextBlock("Let me look."), read_call("t1", "notes.txt")]), TextReply("You need milk.")
    )
    events = await stream_turn(agent.stub, sid, "what do I need?")
    run_id = events[0].run_id
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    # agent_end and llm_output are dispatched after run_finished and not awaited.
    await host.wait_for("agent_end", "llm_output")
    calls = host.in_run(run_id)
    assert [label(c) for c in calls] == ONE_TOOL_TURN
    assert [c.seq for c in calls] == list(range(1, len(ONE_TOOL_TURN) + 1))
    assistants = [as_dict(c.request.event.message) for c in calls if label(c) == "before_message_write:assistant"]
    assert [a["text"] for a in assistants] == ["Let me look.", "You need milk."]
    for call in calls:
        assert call.request.context.session_id == sid
        assert call.request.context.session_key == session.identity.session_key
        assert call.request.context.plugin_id == "observer"
        assert call.request.context.workspace_dir == str(agent.workspace(sid))
    tool_call = host.of("before_tool_call")[0].request
    assert (tool_call.context.tool_name, tool_call.context.tool_call_id) == ("read", "t1")

    fake_model.enqueue(TextReply("Anything else?"))
    events = await stream_turn(agent.stub, sid, "thanks")
    second = events[0].run_id
    await host.wait_until(lambda: any(c.hook == "llm_output" for c in host.in_run(second)))
    calls = host.in_run(second)
    assert [label(c) for c in calls][:2] == ["before_message_write:system_prompt", "before_message_write:message"]
    assert [c.seq for c in calls] == list(range(1, len(calls) + 1))  # dispatch_seq restarts per run
    assert len(host.of("session_start")) == 1  # the first turn of the session only


# ---------------------------------------------------------------------- payloads


async def test_llm_input_and_llm_output_carry_the_effective_prompt_and_usage(
    agent: Agent, fake_model: FakeAnthropic
) -> None:
    host = await agent.host(
        {
            "before_model_resolve": returning(hook_pb2.BeforeModelResolveResult(model_override="claude-opus-4-6")),
            "before_prompt_build": returning(hook_pb2.BeforePromptBuildResult(prepend_context="Recall: tea.")),
        }
    )
    await agent.register(
        "observer", host.address, ("before_model_resolve", "before_prompt_build", "llm_input", "llm_output")
    )
    session = await create_session(agent.stub, system_prompt="Be brief.")
    sid = session.identity.session_id
    usage = Usage(input_tokens=11, output_tokens=7, cache_read_input_tokens=3, cache_creation_input_tokens=2)
    fake_model.enqueue(TextReply("Tea it is.", usage=usage))
    request = turn_api.StreamTurnRequest(session_id=sid, input=image_input("what now?"))
    events = [r.event async for r in agent.stub.StreamTurn(request)]
    run_id = events[0].run_id
    await host.wait_for("llm_input", "llm_output")
    # run_started names the model the run uses, after before_model_resolve; the request went to it.
    assert events[0].run_started.model_ref == "anthropic/claude-opus-4-6"
    assert fake_model.requests[-1].model == "claude-opus-4-6"
    history = await agent.stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
    assert history.entries[0].system_prompt.model_ref == "anthropic/claude-opus-4-6"

    llm_input = host.of("llm_input")[0].request.event
    assert (llm_input.run_id, llm_input.session_id) == (run_id, sid)
    assert (llm_input.provider, llm_input.model) == ("anthropic", "claude-opus-4-6")
    assert llm_input.system_prompt == "Be brief."
    assert llm_input.prompt == "Recall: tea.\n\nwhat now?"
    assert llm_input.images_count == 1
    assert llm_input.history_messages.message_count == 0

    llm_output = host.of("llm_output")[0].request.event
    assert (llm_output.run_id, llm_output.session_id) == (run_id, sid)
    assert (llm_output.provider, llm_output.model) == ("anthropic", "claude-opus-4-6")
    assert list(llm_output.assistant_texts) == ["Tea it is."]
    assert as_dict(llm_output.last_assistant)["role"] == "assistant"
    assert json_format.MessageToDict(llm_output.usage) == {
        "input": "11",
        "output": "7",
        "cacheRead": "3",
        "cacheWrite": "2",
        "total": "23",
    }


async def test_after_tool_call_reports_details_errors_and_duration(agent: Agent, fake_model: FakeAnthropic) -> None:
    host = await agent.host()
    await agent.register("observer", host.address, ("after_tool_call",))
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    (agent.workspace(sid) / "notes.txt").write_text("one\ntwo\n")
    fake_model.enqueue(
        Reply(blocks=[read_call("ok", "notes.txt"), read_call("missing", "nope.txt")]), TextReply("done")
    )
    events = await stream_turn(agent.stub, sid, "read both")
    await host.wait_until(lambda: len(host.of("after_tool_call")) == 2)
    by_call = {c.request.event.tool_call_id: c.request for c in host.of("after_tool_call")}

    ok = by_call["ok"]
    assert ok.event.tool_name == "read"
    assert ok.event.run_id == events[0].run_id
    assert as_dict(ok.event.params) == {"path": "notes.txt"}
    assert json.loads(ok.event.params_json) == {"path": "notes.txt"}
    assert as_dict(ok.event.result) == {"path": "notes.txt", "total_lines": 2.0, "start_line": 1.0, "end_line": 2.0}
    assert ok.event.error == ""
    assert ok.event.duration_ms >= 0
    assert (ok.context.tool_name, ok.context.tool_call_id) == ("read", "ok")

    missing = by_call["missing"]
    assert missing.event.error == "File not found: nope.txt"
    assert last_of(events, "tool_error").error == "File not found: nope.txt"


async def test_agent_end_reports_success_and_a_provider_failure(agent: Agent, fake_model: FakeAnthropic) -> None:
    host = await agent.host()
    await agent.register("observer", host.address, ("agent_end",))
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    fake_model.enqueue(TextReply("fine"))
    await stream_turn(agent.stub, sid, "hello")
    await host.wait_for("agent_end")
    ended = host.of("agent_end")[0].request.event
    assert (ended.success, ended.error) == (True, "")
    assert ended.messages.message_count == 2  # the run's user message and its answer
    assert list(ended.messages.messages) == []  # remote default include_messages NONE: counts only
    assert ended.duration_ms >= 0

    fake_model.enqueue(ErrorReply(status=400, message="messages: malformed"))
    events = await stream_turn(agent.stub, sid, "again")
    assert last_of(events, "run_finished").reason == event_pb2.RUN_REASON_PROVIDER_ERROR
    await host.wait_until(lambda: len(host.of("agent_end")) == 2)
    failed = host.of("agent_end")[1].request.event
    assert failed.success is False
    assert "messages: malformed" in failed.error


async def test_history_is_capped_by_hook_max_payload_bytes(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    async with open_agent(server_factory, tmp_path, {"GENERAL_AGENT_HOOK_MAX_PAYLOAD_BYTES": "300"}) as agent:
        host = await agent.host()
        bindings = [binding("before_prompt_build", include_messages=hook_registration_pb2.HOOK_INCLUDE_MESSAGES_ALL)]
        await agent.register("all", host.address, bindings)
        sid = (await create_session(agent.stub)).identity.session_id
        for index in range(4):
            fake_model.enqueue(TextReply(f"answer {index} " + "x" * 60))
            await stream_turn(agent.stub, sid, f"question {index} " + "y" * 60)
        last = host.of("before_prompt_build")[-1].request.event.messages
        kept = [as_dict(m) for m in last.messages]
        assert (last.message_count, last.truncated) == (6, True)
        assert 0 < len(kept) < 6
        assert sum(len(json.dumps(m, separators=(",", ":"))) for m in kept) <= 300
        # The newest messages are the ones kept.
        assert "answer 2" in json.dumps(kept[-1])


async def test_include_messages_shapes_history_per_registration(agent: Agent, fake_model: FakeAnthropic) -> None:
    host = await agent.host()
    for plugin_id, include, last_n in (
        ("counts", hook_registration_pb2.HOOK_INCLUDE_MESSAGES_NONE, 0),
        ("last", hook_registration_pb2.HOOK_INCLUDE_MESSAGES_LAST_N, 1),
        ("all", hook_registration_pb2.HOOK_INCLUDE_MESSAGES_ALL, 0),
    ):
        bindings = [binding(h, include_messages=include, last_n=last_n) for h in ("before_prompt_build", "llm_input")]
        await agent.register(plugin_id, host.address, bindings)
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    fake_model.enqueue(TextReply("a cat"), TextReply("still a cat"))
    await stream_turn(agent.stub, sid, "first")  # no image yet: history is checked on the second turn
    request = turn_api.StreamTurnRequest(session_id=sid, input=image_input("what is this?"))
    [r async for r in agent.stub.StreamTurn(request)]
    fake_model.enqueue(TextReply("yes"))
    third = await stream_turn(agent.stub, sid, "sure?")
    await host.wait_until(lambda: len(host.of("llm_input")) == 9)

    builds = {
        c.request.context.plugin_id: c.request.event.messages
        for c in host.of("before_prompt_build")
        if c.run_id == third[0].run_id
    }
    assert {k: v.message_count for k, v in builds.items()} == {"counts": 4, "last": 4, "all": 4}
    assert list(builds["counts"].messages) == []
    assert [as_dict(m)["role"] for m in builds["last"].messages] == ["assistant"]
    assert [as_dict(m)["role"] for m in builds["all"].messages] == ["user", "assistant", "user", "assistant"]
    assert not any(v.truncated for v in builds.values())

    history = [
        as_dict(m)
        for c in host.of("llm_input")
        if c.run_id == third[0].run_id and c.request.context.plugin_id == "all"
        for m in c.request.event.history_messages.messages
    ]
    image_turn = history[2]["content"]
    assert {"type": "image", "mime_type": "image/png", "size": float(len(PNG))} in image_turn
    assert "source" not in json.dumps(history)  # no image bytes reach a hook


# ---------------------------------------------------------------------- write path


def redacting(text: str) -> Answer:
    """A tool_result_persist handler replacing the result's output with `text`."""

    async def answer(request: Any, context: ServicerContext) -> hook_pb2.ToolResultPersistResult:
        message = as_dict(request.event.message)
        message["content"] = [{"type": "text", "text": text}]
        result = hook_pb2.ToolResultPersistResult()
        result.message.update(message)
        return result

    return answer


def blocking_assistant_text(text: str) -> Answer:
    async def answer(request: Any, context: ServicerContext) -> hook_pb2.BeforeMessageWriteResult | None:
        message = as_dict(request.event.message)
        if message.get("type") == "assistant" and message.get("text") == text:
            return hook_pb2.BeforeMessageWriteResult(block=True)
        return None

    return answer


async def transcript_lines(agent: Agent, session_id: str, until_text: str) -> list[dict[str, Any]]:
    """The JSONL export once it holds a line containing `until_text` (it is written after commit)."""
    session = await agent.stub.GetSession(session_api.GetSessionRequest(session_id=session_id))
    path = Path(session.session.transcript_path)
    lines: list[dict[str, Any]] = []

    def written() -> bool:
        nonlocal lines
        if not path.exists():
            return False
        lines = [json.loads(line) for line in path.read_text().splitlines() if line]
        return any(until_text in json.dumps(line) for line in lines)

    await wait_until(written)
    return lines


async def test_tool_result_persist_rewrites_the_transcript_not_the_model_history(
    agent: Agent, fake_model: FakeAnthropic
) -> None:
    host = await agent.host({"tool_result_persist": redacting("[redacted]")})
    await agent.register("redactor", host.address, ("tool_result_persist", "before_message_write"))
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    (agent.workspace(sid) / "secret.txt").write_text("the password is swordfish\n")
    fake_model.enqueue(Reply(blocks=[read_call("t1", "secret.txt")]), TextReply("read it"))
    events = await stream_turn(agent.stub, sid, "read the secret")
    assert "swordfish" in json.dumps(fake_model.requests[-1].body["messages"][-1])  # the model got the original
    assert "swordfish" in str(last_of(events, "tool_result"))  # and so did the live event stream

    results = [e.tool_result for e in await agent.history(sid) if e.WhichOneof("entry") == "tool_result"]
    assert [p.text.text for p in results[0].output] == ["[redacted]"]
    # before_message_write saw the rewritten entry (write-path hooks chain).
    written = [as_dict(c.request.event.message) for c in host.of("before_message_write")]
    tool_results = [m for m in written if m.get("role") == "toolResult"]
    assert tool_results[0]["content"] == [{"type": "text", "text": "[redacted]"}]
    assert (tool_results[0]["toolName"], tool_results[0]["isError"]) == ("read", False)
    assert isinstance(tool_results[0]["timestamp"], float)

    lines = await transcript_lines(agent, sid, "read it")
    assert "swordfish" not in json.dumps(lines)
    assert [line["output"] for line in lines if line["type"] == "tool_result"] == [
        [{"type": "text", "text": "[redacted]"}]
    ]


async def test_before_message_write_block_skips_the_entry_but_not_the_model_history(
    agent: Agent, fake_model: FakeAnthropic
) -> None:
    host = await agent.host({"before_message_write": blocking_assistant_text("classified answer")})
    await agent.register("censor", host.address, ("before_message_write",))
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    fake_model.enqueue(TextReply("classified answer"), TextReply("public answer"))
    await stream_turn(agent.stub, sid, "tell me")
    await stream_turn(agent.stub, sid, "and now?")

    kinds = [e.WhichOneof("entry") for e in await agent.history(sid)]
    assert kinds == ["system_prompt", "message", "system_prompt", "message", "assistant"]
    assert "classified answer" in json.dumps(fake_model.requests[-1].body["messages"])
    lines = await transcript_lines(agent, sid, "public answer")
    assert [line["type"] for line in lines] == kinds
    assert "classified answer" not in json.dumps(lines)


# ---------------------------------------------------------------------- failures


def free_port_address() -> str:
    """An address nothing listens on (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


FAILURES = ["sleeps_past_timeout", "raises", "closed_port"]


async def failing_target(agent: Agent, failure: str, hooks: tuple[str, ...]) -> str:
    if failure == "closed_port":
        return free_port_address()
    answer = sleeping(60) if failure == "sleeps_past_timeout" else aborting(grpc.StatusCode.INTERNAL, "boom")
    host = await agent.host(dict.fromkeys(hooks, answer))
    return host.address


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_failing_before_tool_call_fails_closed(agent: Agent, fake_model: FakeAnthropic, failure: str) -> None:
    address = await failing_target(agent, failure, ("before_tool_call",))
    await agent.register("guard", address, [binding("before_tool_call", timeout=0.5)])
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    (agent.workspace(sid) / "notes.txt").write_text("hello\n")
    fake_model.enqueue(Reply(blocks=[read_call("t1", "notes.txt")]), TextReply("blocked, fine"))
    started = time.monotonic()
    events = await stream_turn(agent.stub, sid, "read")
    assert time.monotonic() - started < 10
    error = last_of(events, "tool_error").error
    assert "before_tool_call" in error
    assert "guard" in error
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


@pytest.mark.parametrize("failure", FAILURES)
async def test_failing_prompt_and_observer_hooks_fail_open(
    agent: Agent, fake_model: FakeAnthropic, failure: str
) -> None:
    hooks = ("before_prompt_build", "llm_input")
    address = await failing_target(agent, failure, hooks)
    await agent.register("flaky", address, [binding(h, timeout=0.5) for h in hooks])
    session = await create_session(agent.stub, system_prompt="Base.")
    fake_model.enqueue(TextReply("all good"))
    started = time.monotonic()
    events = await stream_turn(agent.stub, session.identity.session_id, "hi")
    assert time.monotonic() - started < 10
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    assert fake_model.requests[-1].system_text == "Base."


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_failing_fail_closed_prompt_hook_fails_the_run(
    agent: Agent, fake_model: FakeAnthropic, failure: str
) -> None:
    address = await failing_target(agent, failure, ("before_prompt_build",))
    closed = binding(
        "before_prompt_build", timeout=0.5, failure_policy=hook_registration_pb2.HOOK_FAILURE_POLICY_FAIL_CLOSED
    )
    await agent.register("strict", address, [closed])
    session = await create_session(agent.stub)
    started = time.monotonic()
    events = await stream_turn(agent.stub, session.identity.session_id, "hi")
    assert time.monotonic() - started < 10
    finished = last_of(events, "run_finished")
    assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_HOOK_FAILED)
    assert "strict" in finished.error.message
    assert fake_model.requests == []  # the run failed before any model call
