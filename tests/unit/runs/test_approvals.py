"""Tool approvals in process (docs/protocol.md, "Tool approvals"): what a policy or a hook asks, what each answer
does to the call, the model's next request and the history, and what the session remembers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from general_agent_server.domain.errors import ServiceError
from general_agent_server.domain.events import (
    ApprovalRequested,
    ApprovalResolved,
    HostedToolCall,
    RunFinished,
    RunOutcome,
    ToolError,
    ToolResult,
)
from general_agent_server.domain.records import ApprovalDecision, CallStatus, ResolvedBy
from general_agent_server.domain.session import HostedToolDefinition, SessionIdentity, SessionMode, SessionOverrides
from general_agent_server.hooks.registry import HookHandler, JsonObject
from general_agent_server.model.scripted import Reply, ToolUse, text
from tests.support.in_process import CTX, InProcess, finished, in_process, kinds

APPROVE, ALWAYS, DENY = ApprovalDecision.APPROVE, ApprovalDecision.APPROVE_ALWAYS, ApprovalDecision.DENY
LOOKUP = HostedToolDefinition(
    name="lookup",
    description="Looks a key up.",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
)


def calls(*uses: tuple[str, str, dict[str, object]]) -> Reply:
    return Reply(blocks=[ToolUse(id=call_id, name=name, input=arguments) for name, call_id, arguments in uses])


def write(call_id: str, path: str = "a.txt", content: str = "hello") -> tuple[str, str, dict[str, object]]:
    return ("write", call_id, {"path": path, "content": content})


def bodies(events: list, kind: type) -> list:  # type: ignore[type-arg]
    return [e.body for e in events if isinstance(e.body, kind)]


def workspace(tmp_path: Path, sid: str) -> Path:
    return tmp_path / "workspace" / "default" / sid


def results_sent(agent: InProcess, request: int) -> list[dict[str, object]]:
    """The tool_result blocks of the last user message of the model's `request`-th request."""
    return [b for b in agent.model.requests[request].messages[-1]["content"] if b["type"] == "tool_result"]


async def test_a_policy_suspends_a_mutating_call_until_it_is_approved(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), text("written")]) as agent:
        sid = await agent.session(approval_policy=("mutating",))
        first = await agent.turn(sid, "write a file")
        assert not workspace(tmp_path, sid).joinpath("a.txt").exists()
        stored = await agent.store.get_tool_call(CTX.tenant, sid, "w1")
        last = await agent.answer(sid, "w1", APPROVE)
        content = workspace(tmp_path, sid).joinpath("a.txt").read_text()
    assert kinds(first)[-2:] == ["approval_requested", "run_finished"]
    asked = bodies(first, ApprovalRequested)[0]
    assert (asked.tool_name, asked.title, asked.severity, asked.requested_by) == (
        "write",
        "Approve write?",
        "warning",
        "policy",
    )
    assert json.loads(asked.input_json) == {"path": "a.txt", "content": "hello"}
    assert finished(first).outcome is RunOutcome.SUSPENDED
    assert finished(first).pending_call_ids == ("w1",)
    assert stored is not None
    assert stored.status is CallStatus.AWAITING_APPROVAL
    assert kinds(last)[:2] == ["approval_resolved", "tool_result"]
    assert finished(last).outcome is RunOutcome.COMPLETED
    assert content == "hello"
    assert len(agent.model.requests) == 2


async def test_read_only_tools_and_sessions_without_a_policy_are_not_asked(tmp_path: Path) -> None:
    answers = [calls(("glob", "g1", {"pattern": "*"})), text("ok"), calls(write("w1")), text("done")]
    async with in_process(tmp_path, answers) as agent:
        guarded = await agent.session(approval_policy=("mutating",))
        free = await agent.session()
        read = await agent.turn(guarded, "list")
        unguarded = await agent.turn(free, "write")
    assert finished(read).outcome is RunOutcome.COMPLETED
    assert finished(unguarded).outcome is RunOutcome.COMPLETED
    assert "approval_requested" not in kinds(read) + kinds(unguarded)


async def test_the_servers_default_policy_applies_to_sessions_that_set_none(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), text("done")], approval_policy="write") as agent:
        default = await agent.session()
        opted_out = await agent.session(approval_policy=())
        asked = await agent.turn(default, "write")
        agent.model.enqueue(calls(write("w2")), text("done"))
        free = await agent.turn(opted_out, "write")
    assert finished(asked).outcome is RunOutcome.SUSPENDED
    assert finished(free).outcome is RunOutcome.COMPLETED


async def test_a_denial_gives_the_model_an_error_and_the_call_never_runs(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), text("ok, I will not")]) as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "write")
        denied = await agent.answer(sid, "w1", DENY, message="not in prod")
        plain = [calls(write("w2")), text("fine")]
        agent.model.enqueue(*plain)
        await agent.turn(sid, "again")
        default = await agent.answer(sid, "w2", DENY)
        exists = workspace(tmp_path, sid).joinpath("a.txt").exists()
    assert kinds(denied)[:2] == ["approval_resolved", "tool_error"]
    assert bodies(denied, ApprovalResolved)[0].decision == "DENY"
    assert bodies(denied, ToolError)[0].error == "not in prod"
    assert results_sent(agent, 1)[0]["is_error"] is True
    assert "not in prod" in json.dumps(results_sent(agent, 1)[0]["content"])
    assert bodies(default, ToolError)[0].error == "The user denied this tool call."
    assert not exists


async def test_an_edited_input_is_validated_and_runs_instead_of_the_shown_one(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1", content="rm -rf")), text("written")]) as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "write")
        with pytest.raises(ServiceError) as invalid:
            await agent.answer(sid, "w1", APPROVE, edited='{"path": 5}')
        with pytest.raises(ServiceError) as not_json:
            await agent.answer(sid, "w1", APPROVE, edited="{nope")
        still = await agent.store.get_tool_call(CTX.tenant, sid, "w1")
        events = await agent.answer(sid, "w1", APPROVE, edited='{"path": "b.txt", "content": "safe"}')
        content = workspace(tmp_path, sid).joinpath("b.txt").read_text()
    assert invalid.value.field_violations[0].field == "edited_input"
    assert not_json.value.field_violations[0].field == "edited_input_json"
    assert still is not None
    assert still.status is CallStatus.AWAITING_APPROVAL
    assert json.loads(bodies(events, ApprovalResolved)[0].input_json) == {"path": "b.txt", "content": "safe"}
    assert content == "safe"
    # The history keeps the call as the model made it; the result is the edited call's.
    assistant = agent.model.requests[1].messages[1]["content"]
    assert [b["input"] for b in assistant if b["type"] == "tool_use"] == [{"path": "a.txt", "content": "rm -rf"}]
    assert not workspace(tmp_path, sid).joinpath("a.txt").exists()


async def test_approve_always_is_remembered_until_a_new_policy_or_a_reset(tmp_path: Path) -> None:
    answers = [calls(write("w1")), text("1"), calls(write("w2")), text("2")]
    async with in_process(tmp_path, answers) as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "one")
        await agent.answer(sid, "w1", ALWAYS)
        second = await agent.turn(sid, "two")
        remembered = (await agent.agent.sessions.get_session(CTX, sid)).record.approved_tools
        await agent.agent.sessions.resume_session(CTX, sid, SessionOverrides(approval_policy=("write",)))
        cleared = (await agent.agent.sessions.get_session(CTX, sid)).record.approved_tools
        agent.model.enqueue(calls(write("w3")), text("3"))
        third = await agent.turn(sid, "three")
    assert finished(second).outcome is RunOutcome.COMPLETED
    assert remembered == ("write",)
    assert cleared == ()
    assert finished(third).outcome is RunOutcome.SUSPENDED


async def test_hosted_and_approval_calls_resolve_in_any_order_and_reach_the_model_in_call_order(
    tmp_path: Path,
) -> None:
    reply = calls(write("w1"), ("lookup", "h1", {"key": "k"}), write("w2", path="c.txt"))
    async with in_process(tmp_path, [reply, text("all done")]) as agent:
        sid = await agent.session(hosted=[LOOKUP], approval_policy=("write", "lookup"))
        first = await agent.turn(sid, "go")
        with pytest.raises(ServiceError) as early:
            await agent.submit(sid, "h1", "too early")
        answered_w2 = await agent.answer(sid, "w2", DENY)
        approved_h1 = await agent.answer(sid, "h1", APPROVE)
        submitted = await agent.submit(sid, "h1", "value")
        last = await agent.answer(sid, "w1", APPROVE)
    assert kinds(first).count("approval_requested") == 3
    assert [b.call_id for b in bodies(first, ApprovalRequested)] == ["w1", "h1", "w2"]
    assert "hosted_tool_call" not in kinds(first)
    assert early.value.reason == "APPROVAL_PENDING"
    assert finished(answered_w2).pending_call_ids == ("w1", "h1")
    assert [b.call_id for b in bodies(approved_h1, HostedToolCall)] == ["h1"]
    assert finished(approved_h1).pending_call_ids == ("w1", "h1")
    assert finished(submitted).pending_call_ids == ("w1",)
    assert finished(last).outcome is RunOutcome.COMPLETED
    assert [b.call_id for b in bodies(last, ToolResult)] == ["w1"]
    assert [r["tool_use_id"] for r in results_sent(agent, 1)] == ["w1", "h1", "w2"]


async def test_an_identical_answer_replays_and_a_different_one_is_refused(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), text("done")]) as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "write")
        first = await agent.answer(sid, "w1", APPROVE)
        again = await agent.answer(sid, "w1", APPROVE)
        with pytest.raises(ServiceError) as different:
            await agent.answer(sid, "w1", DENY)
        with pytest.raises(ServiceError) as unknown:
            await agent.answer(sid, "nope", APPROVE)
    assert [e.sequence for e in again] == [e.sequence for e in first]
    assert different.value.reason == "TOOL_CALL_ALREADY_RESOLVED"
    assert unknown.value.reason == "UNKNOWN_TOOL_CALL"


async def test_an_unanswered_approval_times_out_as_its_behaviour_says(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), text("denied")], approval_timeout="0.05") as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "write")
        watched = await until_completed(agent, sid)
    resolved = bodies(watched, ApprovalResolved)
    assert resolved
    assert resolved[0].timed_out
    assert resolved[0].decision == "DENY"
    assert bodies(watched, ToolError)[0].error == "The approval of this tool call timed out."
    assert results_sent(agent, 1)[0]["is_error"] is True


async def test_an_approval_that_allows_on_timeout_runs_the_call(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(("glob", "g1", {"pattern": "*"})), text("listed")]) as agent:
        ask = {"title": "List?", "timeoutBehavior": "APPROVAL_TIMEOUT_BEHAVIOR_ALLOW", "timeout": "0.05s"}
        agent.agent.hook_runner.registry.register([approval_hook({"requireApproval": ask}, "guard")])
        sid = await agent.session()
        await agent.turn(sid, "list")
        watched = await until_completed(agent, sid)
    resolved = bodies(watched, ApprovalResolved)[0]
    assert (resolved.timed_out, resolved.decision) == (True, "APPROVE")
    assert [b.call_id for b in bodies(watched, ToolResult)] == ["g1"]


async def until_completed(agent: InProcess, sid: str) -> list:  # type: ignore[type-arg]
    """The session's events from the start until a run finishes other than SUSPENDED."""
    seen = []
    async for event in agent.agent.runs.watch(CTX, sid, after_sequence=0):
        seen.append(event)
        if isinstance(event.body, RunFinished) and event.body.outcome is not RunOutcome.SUSPENDED:
            return seen
    return seen


def approval_hook(result: JsonObject, plugin: str) -> HookHandler:
    async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
        return result

    return HookHandler(plugin_id=plugin, hook="before_tool_call", call=call)


async def test_a_hook_asks_with_its_own_title_severity_and_timeout_behaviour(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(("glob", "g1", {"pattern": "*"})), text("listed")]) as agent:
        ask = {"title": "List files?", "severity": "critical", "timeoutBehavior": "allow", "timeout": 60}
        agent.agent.hook_runner.registry.register(
            [approval_hook({"requireApproval": ask}, "guard"), approval_hook({"params": {"pattern": "x"}}, "later")]
        )
        sid = await agent.session()
        first = await agent.turn(sid, "list")
        last = await agent.answer(sid, "g1", APPROVE)
    asked = bodies(first, ApprovalRequested)[0]
    assert (asked.title, asked.severity, asked.requested_by, asked.allow_on_timeout) == (
        "List files?",
        "critical",
        "hook:guard",
        True,
    )
    assert json.loads(asked.input_json) == {"pattern": "*"}
    assert finished(last).outcome is RunOutcome.COMPLETED


async def test_a_fork_copies_the_always_approved_tools_and_a_reset_clears_them(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), text("1"), calls(write("w2")), text("2")]) as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "one")
        await agent.answer(sid, "w1", ALWAYS)
        identity = SessionIdentity(mode=SessionMode.CODING, session_id="", session_key="")
        fork = await agent.agent.forks.fork_session(
            CTX, sid, identity=identity, overrides=SessionOverrides(), at_sequence=None, copy_workspace=False
        )
        in_fork = await agent.turn(fork.record.session_id, "two")
        reset = await agent.agent.sessions.reset_session(CTX, sid, "manual")
    assert fork.record.approved_tools == ("write",)
    assert fork.record.config.approval_policy == ("write",)
    assert finished(in_fork).outcome is RunOutcome.COMPLETED
    assert reset.record.approved_tools == ()


async def test_stop_and_reset_resolve_pending_approvals(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(write("w1")), calls(write("w2"))]) as agent:
        sid = await agent.session(approval_policy=("write",))
        await agent.turn(sid, "one")
        await agent.agent.runs.request_stop(CTX, sid)
        stopped = await agent.store.get_tool_call(CTX.tenant, sid, "w1")
        await agent.agent.runs.clear_stop(CTX, sid)
        await agent.turn(sid, "two")
        await agent.agent.sessions.reset_session(CTX, sid, "manual")
        reset = await agent.store.get_tool_call(CTX.tenant, sid, "w2")
        with pytest.raises(ServiceError) as late:
            await agent.answer(sid, "w2", APPROVE)
        view = await agent.agent.sessions.get_session(CTX, sid)
    assert stopped is not None
    assert stopped.status is CallStatus.RESOLVED
    assert stopped.resolved_by is ResolvedBy.STOP
    assert reset is not None
    assert reset.resolved_by is ResolvedBy.RESET
    assert late.value.reason == "TOOL_CALL_ALREADY_RESOLVED"
    assert view.record.pending_call_ids == ()


async def test_a_lower_priority_block_still_blocks_a_call_a_hook_asked_about(tmp_path: Path) -> None:
    async with in_process(tmp_path, [calls(("glob", "g1", {"pattern": "*"})), text("blocked")]) as agent:
        asker = approval_hook({"requireApproval": {"title": "List?"}}, "asker")
        blocker = approval_hook({"block": True, "blockReason": "no listing"}, "blocker")
        agent.agent.hook_runner.registry.register([replace(asker, priority=5), blocker])
        sid = await agent.session()
        events = await agent.turn(sid, "list")
    assert "approval_requested" not in kinds(events)
    assert bodies(events, ToolError)[0].error == "no listing"
    assert finished(events).outcome is RunOutcome.COMPLETED


async def test_a_subagent_child_cannot_ask_and_is_blocked(tmp_path: Path) -> None:
    answers = [
        calls(("subagents", "s1", {"instructions": "You write files.", "task": "write a file"})),
        calls(write("w1")),
        text("child done"),
        text("parent done"),
    ]
    async with in_process(tmp_path, answers, approval_policy="write") as agent:
        sid = await agent.session()
        events = await agent.turn(sid, "delegate")
        children = [s for s in await agent.store.list_waiting_calls() if s.session_id != sid]
    assert finished(events).outcome is RunOutcome.COMPLETED
    assert children == []
    child_request = agent.model.requests[2]
    assert "a subagent cannot ask for" in json.dumps(child_request.messages[-1]["content"])
