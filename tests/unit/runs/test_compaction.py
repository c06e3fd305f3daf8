"""Compaction in process (scripted model, in-memory store): what is kept, what the summariser is sent, what the
history, transcript, events and usage become, the no-op, failure, threshold, cooldown, automatic and overflow
paths, hooks, and forks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import pytest

from general_agent_server.domain.events import CompactionFinished, CompactionReason, RunOutcome, RunReason
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import AutoCompaction, SessionIdentity, SessionMode, SessionOverrides, Usage
from general_agent_server.domain.transcript import CompactionEntry
from general_agent_server.hooks.registry import HookHandler
from general_agent_server.model.scripted import Failure, Hang, Reply, Text, ToolUse, text
from general_agent_server.runs.compaction import split
from general_agent_server.runs.summarise import SUMMARY_HEADER, SUMMARY_INSTRUCTIONS
from tests.support.in_process import CTX, InProcess, finished, in_process, kinds

OVERFLOW = Failure(
    message="prompt is too long: 215000 tokens > 200000 maximum", http_status=400, error_type="invalid_request_error"
)


def msg(role: Literal["user", "assistant"], *blocks: dict[str, Any]) -> HistoryMessage:
    return HistoryMessage(role=role, content=tuple(blocks), run_id="r")


def user(value: str) -> HistoryMessage:
    return msg("user", {"type": "text", "text": value})


def assistant(value: str) -> HistoryMessage:
    return msg("assistant", {"type": "text", "text": value})


def heavy(reply: Reply, input_tokens: int) -> Reply:
    """A reply whose usage says the request filled `input_tokens` of the context (cache reads included)."""
    usage = Usage(
        input_tokens=input_tokens // 2, cache_read_input_tokens=input_tokens - input_tokens // 2, model_calls=1
    )
    return Reply(blocks=reply.blocks, stop_reason=reply.stop_reason, usage=usage)


async def turns(agent: InProcess, sid: str, count: int) -> None:
    for index in range(count):
        agent.model.enqueue(text(f"answer {index}"))
        await agent.turn(sid, f"question {index}")


def test_the_kept_suffix_starts_at_a_user_turn_and_keeps_tool_exchanges_whole() -> None:
    call = msg("assistant", {"type": "tool_use", "id": "t", "name": "read", "input": {}})
    result = msg("user", {"type": "tool_result", "tool_use_id": "t", "content": "x"})
    history = [user("a"), assistant("A"), user("b"), call, result, assistant("B"), user("c"), assistant("C")]
    assert split(history, 2) == 2  # "b" with its tool exchange, and "c", are kept
    assert split(history, 3) == 0  # nothing older than three turns
    assert split(history, 1) == 6


async def test_nothing_older_than_the_kept_turns_is_a_no_op(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        empty = await agent.agent.sessions.compact(CTX, sid)
        await turns(agent, sid, 2)
        short = await agent.agent.sessions.compact(CTX, sid)
        events = await agent.store.read_events(CTX.tenant, sid, after_sequence=0, limit=1000)
    assert (empty.compacted, empty.messages_before, empty.messages_after) == (False, 0, 0)
    assert (short.compacted, short.messages_before, short.messages_after) == (False, 4, 4)
    assert "compaction_started" not in kinds(events)
    assert len(agent.model.requests) == 2  # no summary request


async def test_a_manual_compaction_summarises_the_older_turns_with_the_model(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        agent.model.enqueue(Reply(blocks=[ToolUse(id="g1", name="glob", input={"pattern": "*.py"})]), text("none"))
        await agent.turn(sid, "list the python files")
        await turns(agent, sid, 3)
        before = agent.history(sid)
        agent.model.enqueue(Reply(blocks=[Text(text="The user asked for python files; there are none.")]))
        outcome = await agent.agent.sessions.compact(CTX, sid, instructions="Mention file names.")
        after = agent.history(sid)
        session = _session(agent, sid)
        record = session.record
        entries = await agent.store.read_transcript(CTX.tenant, sid, after_entry_id=0, limit=100)
        agent.model.enqueue(text("next"))
        await agent.turn(sid, "and now?")
    summary_request = agent.model.requests[5]
    sent = summary_request.messages[0]["content"][0]["text"]
    assert summary_request.system[0]["text"].startswith(SUMMARY_INSTRUCTIONS)
    assert "Mention file names." in summary_request.system[0]["text"]
    assert summary_request.tools == []
    assert "list the python files" in sent
    assert "[called tool glob with" in sent
    assert "question 0" in sent
    assert "question 1" not in sent  # the two most recent turns stay verbatim
    assert outcome.compacted
    assert outcome.reason is CompactionReason.MANUAL_REQUEST
    assert (outcome.messages_before, outcome.messages_after) == (len(before), 5)
    assert outcome.tokens_after_estimated
    assert outcome.tokens_after > 0
    assert after[0]["content"][0]["text"].startswith(SUMMARY_HEADER)
    assert after[1:] == before[-4:]
    assert record.usage_snapshot is None
    assert record.cumulative_usage.model_calls == 6  # five turns' calls and the summary
    assert any(isinstance(e.body, CompactionEntry) for e in entries)
    assert agent.model.requests[-1].messages[0]["content"][0]["text"].startswith(SUMMARY_HEADER)


async def test_a_failed_summary_leaves_the_history_as_it_was(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        await turns(agent, sid, 3)
        before = agent.history(sid)
        agent.model.enqueue(Failure(http_status=529))
        outcome = await agent.agent.sessions.compact(CTX, sid)
        after = agent.history(sid)
        log = await agent.store.read_events(CTX.tenant, sid, after_sequence=0, limit=1000)
    assert not outcome.compacted
    assert outcome.error is not None
    assert "summary failed" in outcome.error.message
    assert after == before
    finished_events = [e.body for e in log if isinstance(e.body, CompactionFinished)]
    assert len(finished_events) == 1
    assert finished_events[0].error is not None


async def test_a_summary_past_its_timeout_is_a_failure(tmp_path: Path) -> None:
    async with in_process(tmp_path, compaction_timeout="0.05") as agent:
        sid = await agent.session()
        await turns(agent, sid, 3)
        agent.model.enqueue(Hang(reply=text("never")))
        outcome = await agent.agent.sessions.compact(CTX, sid)
    assert outcome.error is not None
    assert "compaction_timeout" in outcome.error.message


async def test_maybe_compact_follows_the_threshold_and_the_cooldown(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        await turns(agent, sid, 2)
        agent.model.enqueue(heavy(text("big"), 180_000))
        await agent.turn(sid, "a big one")
        below = await agent.agent.sessions.maybe_compact(CTX, sid, threshold_pct=95, cooldown_seconds=None)
        agent.model.enqueue(text("summary"))
        over = await agent.agent.sessions.maybe_compact(CTX, sid, threshold_pct=0, cooldown_seconds=None)
        agent.model.enqueue(heavy(text("big again"), 190_000))
        await agent.turn(sid, "another big one")
        cooling = await agent.agent.sessions.maybe_compact(CTX, sid, threshold_pct=85, cooldown_seconds=3600)
    assert not below.compacted
    assert below.error is None
    assert over.compacted
    assert over.reason is CompactionReason.TOKEN_THRESHOLD
    assert not cooling.compacted


async def test_automatic_compaction_runs_inside_the_run_before_the_model_call(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session(auto_compaction=AutoCompaction(threshold_pct=50))
        await turns(agent, sid, 2)
        agent.model.enqueue(heavy(text("big"), 150_000))
        await agent.turn(sid, "third")
        agent.model.enqueue(text("the summary"), text("fourth answer"))
        events = await agent.turn(sid, "fourth")
    names = kinds(events)
    assert names[:3] == ["run_started", "compaction_started", "compaction_finished"]
    assert all(e.run_id == events[0].run_id for e in events)
    end = finished(events)
    assert end.outcome is RunOutcome.COMPLETED
    assert end.usage.model_calls == 2  # the summary and the answer
    assert agent.model.requests[-1].messages[0]["content"][0]["text"].startswith(SUMMARY_HEADER)


async def test_a_context_overflow_compacts_once_and_retries(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        await turns(agent, sid, 3)
        agent.model.enqueue(OVERFLOW, text("summary"), text("fits now"))
        events = await agent.turn(sid, "one more")
    compaction = next(e.body for e in events if isinstance(e.body, CompactionFinished))
    assert compaction.reason is CompactionReason.CONTEXT_OVERFLOW
    assert compaction.compacted
    assert finished(events).outcome is RunOutcome.COMPLETED
    assert kinds(events).count("turn_complete") == 2  # the refused call's, then the answer's


async def test_a_second_overflow_fails_the_run_context_overflow(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        await turns(agent, sid, 3)
        agent.model.enqueue(OVERFLOW, text("summary"), OVERFLOW)
        end = finished(await agent.turn(sid, "one more"))
    assert (end.outcome, end.reason) == (RunOutcome.FAILED, RunReason.CONTEXT_OVERFLOW)


async def test_an_overflow_with_nothing_to_compact_fails_the_run(tmp_path: Path) -> None:
    async with in_process(tmp_path, [OVERFLOW]) as agent:
        sid = await agent.session()
        end = finished(await agent.turn(sid, "huge"))
    assert (end.outcome, end.reason) == (RunOutcome.FAILED, RunReason.CONTEXT_OVERFLOW)


async def test_a_long_history_is_summarised_in_chunks_that_fit_the_window(tmp_path: Path) -> None:
    async with in_process(tmp_path, context_windows="claude=6000", compaction_summary_max_tokens="500") as agent:
        sid = await agent.session()
        for index in range(6):
            agent.model.enqueue(text("x" * 3000))
            await agent.turn(sid, f"question {index} " + "y" * 3000)
        agent.model.enqueue(*[text(f"summary part {i}") for i in range(10)])
        outcome = await agent.agent.sessions.compact(CTX, sid)
    summary_requests = agent.model.requests[6:]
    assert outcome.compacted
    assert 2 <= len(summary_requests) <= 4
    assert "<summary_so_far>\nsummary part 0" in summary_requests[1].messages[0]["content"][0]["text"]
    cap = int(6000 * 0.8) * 4  # characters the summariser's input may take
    assert all(len(r.messages[0]["content"][0]["text"]) <= cap for r in summary_requests)


async def test_compaction_is_refused_while_a_run_is_active(tmp_path: Path) -> None:
    hang = Hang(reply=text("slow"))
    async with in_process(tmp_path, [hang]) as agent:
        sid = await agent.session()
        turn = asyncio.ensure_future(agent.turn(sid, "go"))
        while not agent.model.requests:
            await asyncio.sleep(0)
        with pytest.raises(Exception, match="active run") as busy:
            await agent.agent.sessions.compact(CTX, sid)
        hang.release.set()
        await turn
    assert getattr(busy.value, "reason", "") == "SESSION_BUSY"


async def test_the_compaction_hooks_see_the_counts(tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def observer(hook: str) -> HookHandler:
        async def call(event: dict[str, Any], context: dict[str, Any]) -> None:
            seen.append((hook, event))

        return HookHandler(plugin_id="observer", hook=hook, call=call)

    async with in_process(tmp_path) as agent:
        agent.agent.hook_runner.registry.register([observer("before_compaction"), observer("after_compaction")])
        sid = await agent.session()
        await turns(agent, sid, 3)
        agent.model.enqueue(text("summary"))
        await agent.agent.sessions.compact(CTX, sid)
        await asyncio.gather(*agent.agent.hook_runner.background)
    events = dict(seen)
    assert events["before_compaction"]["messageCount"] == 6
    assert events["before_compaction"]["compactingCount"] == 2
    assert events["after_compaction"]["messageCount"] == 5
    assert events["after_compaction"]["compactedCount"] == 2


async def test_a_fork_after_a_compaction_copies_the_compacted_history(tmp_path: Path) -> None:
    async with in_process(tmp_path) as agent:
        sid = await agent.session()
        await turns(agent, sid, 3)
        first_run_end = (await agent.store.list_runs(CTX.tenant, sid))[0].last_sequence
        agent.model.enqueue(text("summary"))
        await agent.agent.sessions.compact(CTX, sid)
        compacted = agent.history(sid)
        identity = SessionIdentity(mode=SessionMode.CODING, session_id="", session_key="")
        fork = await agent.agent.forks.fork_session(
            CTX, sid, identity=identity, overrides=SessionOverrides(), at_sequence=None, copy_workspace=False
        )
        with pytest.raises(Exception, match="before the last compaction"):
            await agent.agent.forks.fork_session(
                CTX,
                sid,
                identity=identity,
                overrides=SessionOverrides(),
                at_sequence=first_run_end,
                copy_workspace=False,
            )
        forked = agent.history(fork.record.session_id)
    assert forked == compacted


def _session(agent: InProcess, sid: str) -> Any:
    session = agent.agent.cache.peek(CTX.tenant, sid)
    assert session is not None
    return session
