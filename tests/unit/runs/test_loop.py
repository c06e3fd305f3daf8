"""The agent loop in process (scripted model, in-memory store): event order, tool rounds, hosted suspensions,
failures, limits, stop and steering, each checked on what hosts receive, what the model was sent and what
the history keeps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from general_agent_server.domain.events import RunOutcome, RunReason, StopReason, ToolError, ToolResult
from general_agent_server.domain.session import HostedToolDefinition, SessionMode
from general_agent_server.model.scripted import Failure, Hang, Reply, Text, ToolUse, text
from general_agent_server.runs.state import BusyPolicy
from tests.support.in_process import CTX, finished, in_process, kinds

LOOKUP = HostedToolDefinition(
    name="lookup",
    description="Looks a key up.",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}},
)


def user_text(value: str) -> dict[str, object]:
    """A text block of the last message, which carries the prompt-cache breakpoint."""
    return {"type": "text", "text": value, "cache_control": {"type": "ephemeral"}}


def tool(name: str, call_id: str, **arguments: object) -> Reply:
    return Reply(blocks=[ToolUse(id=call_id, name=name, input=dict(arguments))])


async def test_a_text_turn_streams_in_the_documented_order(tmp_path: Path) -> None:
    async with in_process(tmp_path, [text("Hello there", "Hello", " there")]) as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "hi")
    assert kinds(events) == [
        "run_started",
        "assistant_delta",
        "assistant_delta",
        "usage_snapshot",
        "turn_complete",
        "run_finished",
    ]
    assert finished(events).outcome is RunOutcome.COMPLETED
    assert [e.sequence for e in events] == sorted({e.sequence for e in events})
    assert agent.model.requests[0].messages == [{"role": "user", "content": [user_text("hi")]}]


async def test_a_local_tool_round_feeds_its_result_to_the_next_call(tmp_path: Path) -> None:
    async with in_process(tmp_path, [tool("glob", "c1", pattern="*.txt"), text("found it")]) as agent:
        sid = await agent.session()
        (tmp_path / "workspace" / "default" / sid).mkdir(parents=True)
        (tmp_path / "workspace" / "default" / sid / "a.txt").write_text("x")
        events = await agent.turn(sid, "find text files")
        history = agent.history(sid)
    assert kinds(events)[1:7] == [
        "usage_snapshot",
        "tool_call",
        "tool_result",
        "turn_complete",
        "assistant_delta",
        "usage_snapshot",
    ]
    result = next(e.body for e in events if isinstance(e.body, ToolResult))
    assert "a.txt" in json.dumps([getattr(p, "text", "") for p in result.output])
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[2]["content"][0]["tool_use_id"] == "c1"
    assert agent.model.requests[1].messages[2]["content"][0]["type"] == "tool_result"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (tool("no_such_tool", "c1"), "Tool no_such_tool not found"),
        (tool("glob", "c1", pattern=5), "pattern"),
    ],
    ids=["unknown-tool", "invalid-input"],
)
async def test_a_call_that_cannot_run_is_a_tool_error_the_model_sees(
    tmp_path: Path, reply: Reply, message: str
) -> None:
    async with in_process(tmp_path, [reply, text("sorry")]) as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "go")
    error = next(e.body for e in events if isinstance(e.body, ToolError))
    assert message in error.error
    assert kinds(events).index("tool_error") == kinds(events).index("tool_call") + 1
    sent = agent.model.requests[1].messages[2]["content"][0]
    assert sent["is_error"] is True
    assert finished(events).outcome is RunOutcome.COMPLETED


async def test_max_tokens_inside_a_tool_call_fails_the_run_and_keeps_it_out_of_history(tmp_path: Path) -> None:
    cut = Reply(blocks=[Text(text="let me"), ToolUse(id="c1", name="glob", input={})], stop_reason="max_tokens")
    async with in_process(tmp_path, [cut]) as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "go")
        history = agent.history(sid)
    end = finished(events)
    assert (end.outcome, end.reason, end.stop_reason) == (
        RunOutcome.FAILED,
        RunReason.OUTPUT_TRUNCATED,
        StopReason.LENGTH,
    )
    assert "tool_call" not in kinds(events)
    assert [m["role"] for m in history] == ["user"]


async def test_a_refusal_fails_the_run(tmp_path: Path) -> None:
    async with in_process(tmp_path, [Reply(blocks=[Text(text="no")], stop_reason="refusal")]) as agent:
        sid = await agent.session()
        end = finished(await agent.turn(sid, "go"))
    assert (end.outcome, end.reason) == (RunOutcome.FAILED, RunReason.MODEL_REFUSAL)


async def test_a_provider_error_fails_the_run_and_the_session_stays_usable(tmp_path: Path) -> None:
    async with in_process(tmp_path, [Failure(http_status=529), text("back")]) as agent:
        sid = await agent.session()
        failed = await agent.turn(sid, "one")
        again = await agent.turn(sid, "two")
    end = finished(failed)
    assert (end.outcome, end.reason) == (RunOutcome.FAILED, RunReason.PROVIDER_ERROR)
    assert end.error is not None
    assert end.error.metadata["http_status"] == "529"
    assert finished(again).outcome is RunOutcome.COMPLETED


@pytest.mark.parametrize("retries", [0, 1, 2])
async def test_a_stream_broken_mid_way_is_retried_and_its_partial_text_never_enters_history(
    tmp_path: Path, retries: int
) -> None:
    broken = Failure(after_blocks=1, partial=text("half an ans"))
    answers = [broken] * retries + [text("a whole answer")]
    async with in_process(tmp_path, answers, model_max_retries=str(retries)) as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "go")
        history = agent.history(sid)
    assert finished(events).outcome is RunOutcome.COMPLETED
    assert kinds(events).count("turn_complete") == retries + 1
    assert history[-1]["content"] == [{"type": "text", "text": "a whole answer"}]
    assert len(agent.model.requests) == retries + 1


async def test_a_stream_broken_past_the_retry_budget_fails_provider_error(tmp_path: Path) -> None:
    broken = Failure(after_blocks=1, partial=text("half"))
    async with in_process(tmp_path, [broken, broken], model_max_retries="1") as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "go")
        history = agent.history(sid)
    end = finished(events)
    assert (end.outcome, end.reason) == (RunOutcome.FAILED, RunReason.PROVIDER_ERROR)
    assert [m["role"] for m in history] == ["user"]


async def test_hosted_calls_suspend_together_and_the_last_submit_continues(tmp_path: Path) -> None:
    both = Reply(blocks=[ToolUse(id="h1", name="lookup", input={"key": "a"}), ToolUse(id="h2", name="lookup")])
    async with in_process(tmp_path, [both, text("done")]) as agent:
        sid = await agent.session(hosted=[LOOKUP])
        suspended = await agent.turn(sid, "look both up")
        first = await agent.submit(sid, "h2", "B")
        last = await agent.submit(sid, "h1", "A")
        history = agent.history(sid)
    assert kinds(suspended)[-3:] == ["hosted_tool_call", "hosted_tool_call", "run_finished"]
    assert finished(suspended).outcome is RunOutcome.SUSPENDED
    assert finished(first).pending_call_ids == ("h1",)
    assert finished(last).outcome is RunOutcome.COMPLETED
    # The results reach the model in call order, whatever order they were submitted in.
    assert [b["tool_use_id"] for b in history[2]["content"]] == ["h1", "h2"]


async def test_an_identical_resubmit_replays_and_a_different_one_is_refused(tmp_path: Path) -> None:
    async with in_process(tmp_path, [tool("lookup", "h1"), text("done")]) as agent:
        sid = await agent.session(hosted=[LOOKUP])
        await agent.turn(sid, "go")
        original = await agent.submit(sid, "h1", "A")
        replay = await agent.submit(sid, "h1", "A")
        with pytest.raises(Exception, match="already resolved") as refused:
            await agent.submit(sid, "h1", "other")
    assert [e.sequence for e in replay] == [e.sequence for e in original]
    assert getattr(refused.value, "reason", "") == "TOOL_CALL_ALREADY_RESOLVED"


async def test_the_stop_flag_stops_a_turn_before_the_model_is_called(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        await agent.agent.runs.request_stop(CTX, sid)
        events = await agent.turn(sid, "hi")
        history = agent.history(sid)
    assert kinds(events) == ["run_started", "turn_complete", "run_finished"]
    assert finished(events).reason is RunReason.STOP_REQUESTED
    assert agent.model.requests == []
    assert history == []


async def test_the_model_call_limit_fails_the_run(tmp_path: Path) -> None:
    answers = [tool("glob", f"c{i}", pattern="*") for i in range(3)]
    async with in_process(tmp_path, answers, max_model_calls_per_run="2") as agent:
        sid = await agent.session()
        end = finished(await agent.turn(sid, "loop"))
    assert (end.outcome, end.reason) == (RunOutcome.FAILED, RunReason.MAX_MODEL_CALLS)
    assert len(agent.model.requests) == 2


async def test_the_tool_call_limit_refuses_the_round_that_crosses_it(tmp_path: Path) -> None:
    many = Reply(blocks=[ToolUse(id=f"c{i}", name="glob", input={"pattern": "*"}) for i in range(3)])
    async with in_process(tmp_path, [many], max_tool_calls_per_run="2") as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "go")
        history = agent.history(sid)
    assert finished(events).reason is RunReason.MAX_TOOL_CALLS
    assert kinds(events).count("tool_error") == 3
    assert len(history[-1]["content"]) == 3  # every tool_use has its tool_result


async def test_a_steering_message_reaches_the_next_model_call(tmp_path: Path) -> None:
    hang = Hang(reply=tool("glob", "c1", pattern="*"), after_blocks=0)
    async with in_process(tmp_path, [hang, text("noted")]) as agent:
        sid = await agent.session()
        turn = asyncio.ensure_future(agent.turn(sid, "work"))
        while not agent.model.requests:
            await asyncio.sleep(0)
        steer = asyncio.ensure_future(agent.turn(sid, "also this", policy=BusyPolicy.STEER))
        session = agent.agent.cache.peek(CTX.tenant, sid)
        assert session is not None
        while not session.record.pending_injections:
            await asyncio.sleep(0)
        hang.release.set()
        events, steered = await turn, await steer
    assert "message_injected" in kinds(events)
    assert finished(events).outcome is RunOutcome.COMPLETED
    last_user = agent.model.requests[-1].messages[-1]
    assert last_user["content"][-1] == user_text("also this")
    assert steered[-1].run_id == events[0].run_id


async def test_a_busy_session_rejects_a_second_turn(tmp_path: Path) -> None:
    hang = Hang(reply=text("slow"))
    async with in_process(tmp_path, [hang]) as agent:
        sid = await agent.session()
        turn = asyncio.ensure_future(agent.turn(sid, "first"))
        while not agent.model.requests:
            await asyncio.sleep(0)
        with pytest.raises(Exception, match="active run") as busy:
            await agent.turn(sid, "second")
        hang.release.set()
        await turn
    assert getattr(busy.value, "reason", "") == "SESSION_BUSY"


async def test_an_interrupting_turn_supersedes_the_running_one(tmp_path: Path) -> None:
    hang = Hang(reply=text("never"))
    async with in_process(tmp_path, [hang, text("second")]) as agent:
        sid = await agent.session()
        first = asyncio.ensure_future(agent.turn(sid, "first"))
        while not agent.model.requests:
            await asyncio.sleep(0)
        second = await agent.turn(sid, "second", policy=BusyPolicy.INTERRUPT)
        superseded = await first
    assert finished(superseded).reason is RunReason.SUPERSEDED
    assert finished(second).outcome is RunOutcome.COMPLETED


async def test_a_cancelled_model_call_keeps_its_text_out_of_history(tmp_path: Path) -> None:
    hang = Hang(reply=text("partial"), after_blocks=1)
    async with in_process(tmp_path, [hang]) as agent:
        sid = await agent.session()
        turn = asyncio.ensure_future(agent.turn(sid, "go"))
        while not agent.model.requests:
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        await agent.agent.runs.cancel_run(CTX, sid, "")
        events = await turn
        history = agent.history(sid)
    end = finished(events)
    assert (end.outcome, end.reason, end.stop_reason) == (RunOutcome.STOPPED, RunReason.CANCELLED, StopReason.ABORTED)
    assert [m["role"] for m in history] == ["user"]


async def test_reset_clears_the_history_and_keeps_the_numbering(tmp_path: Path) -> None:
    async with in_process(tmp_path, [text("one"), text("two")]) as agent:
        sid = await agent.session()
        before = await agent.turn(sid, "first")
        await agent.agent.sessions.reset_session(CTX, sid, "")
        after = await agent.turn(sid, "second")
    assert after[0].sequence > before[-1].sequence + 1  # the reset's own event sits between
    assert agent.model.requests[1].messages == [{"role": "user", "content": [user_text("second")]}]


async def test_general_mode_offers_read_only_tools(tmp_path: Path) -> None:
    async with in_process(tmp_path, [text("ok")]) as agent:
        sid = await agent.session(mode=SessionMode.GENERAL)
        await agent.turn(sid, "hi")
    offered = {t["name"] for t in agent.model.requests[0].tools}
    assert {"read", "glob", "grep"} <= offered
    assert not offered & {"write", "edit", "apply_patch", "exec"}
