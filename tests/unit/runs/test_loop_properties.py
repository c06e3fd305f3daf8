"""The agent loop's invariants over generated scripts (hypothesis, in process): whatever the model answers —
text, tool calls (known, unknown, invalid), failures before or during the stream, refusals, truncation — a run
has one run_started and exactly one terminal run_finished, sequences strictly increase, every model call has
its turn_complete, and the history never holds a tool_use without its tool_result nor a partial answer."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from general_agent_server.domain.events import RunFinished, TurnComplete
from general_agent_server.model.scripted import Answer, Failure, Reply, Text, ToolUse
from tests.support.in_process import in_process, kinds

TEXT = st.builds(lambda t: Reply(blocks=[Text(text=t or "x")]), st.text(min_size=1, max_size=12))
CALL = st.sampled_from(
    [
        ToolUse(id="", name="glob", input={"pattern": "*"}),
        ToolUse(id="", name="no_such_tool", input={}),
        ToolUse(id="", name="glob", input={"pattern": 7}),
        ToolUse(id="", name="read", input={"path": "missing.txt"}),
    ]
)
TOOLS = st.lists(CALL, min_size=1, max_size=3).map(lambda calls: Reply(blocks=list(calls)))
ODD = st.sampled_from(
    [
        Failure(http_status=529),
        Failure(http_status=400, message="bad request"),
        Failure(after_blocks=1, partial=Reply(blocks=[Text(text="half")])),
        Reply(blocks=[Text(text="no")], stop_reason="refusal"),
        Reply(blocks=[Text(text="cut"), ToolUse(id="", name="glob", input={})], stop_reason="max_tokens"),
        Reply(blocks=[Text(text="long")], stop_reason="max_tokens"),
    ]
)
SCRIPT = st.lists(st.one_of(TEXT, TOOLS, TOOLS, ODD), min_size=1, max_size=6)


def numbered(script: list[Answer]) -> list[Answer]:
    """Unique tool call ids across the script, as a real model gives them."""
    out: list[Answer] = []
    counter = 0
    for answer in script:
        if isinstance(answer, Reply):
            blocks = []
            for block in answer.blocks:
                if isinstance(block, ToolUse):
                    counter += 1
                    block = ToolUse(id=f"toolu_{counter}", name=block.name, input=block.input)
                blocks.append(block)
            answer = Reply(blocks=blocks, stop_reason=answer.stop_reason, usage=answer.usage)
        out.append(answer)
    return out


def check_history(history: list[dict[str, Any]]) -> None:
    pending: set[str] = set()
    for message in history:
        for block in message["content"]:
            if block.get("type") == "tool_use":
                pending.add(block["id"])
            elif block.get("type") == "tool_result":
                assert block["tool_use_id"] in pending
                pending.discard(block["tool_use_id"])
        if message["role"] == "user":
            assert not pending, f"tool_use without a result: {pending}"
        assert not any(b.get("text") == "half" for b in message["content"])  # partial output never kept
    assert not pending, f"tool_use without a result at the end: {pending}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=SCRIPT, turns=st.integers(min_value=1, max_value=2))
async def test_every_script_keeps_the_run_invariants(script: list[Answer], turns: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        async with in_process(Path(root), numbered(script) * turns, model_max_retries="1") as agent:
            sid = await agent.session()
            last = 0
            for index in range(turns):
                events = await agent.turn(sid, f"turn {index}")
                names = kinds(events)
                assert names[0] == "run_started"
                assert names.count("run_started") == 1
                finished = [e.body for e in events if isinstance(e.body, RunFinished)]
                assert len(finished) == 1
                assert finished[0].terminal
                assert isinstance(events[-1].body, RunFinished)
                sequences = [e.sequence for e in events]
                assert sequences == sorted(set(sequences))
                assert sequences[0] > last
                last = sequences[-1]
                assert names.count("turn_complete") >= 1 or finished[0].reason is not None
                calls = [e for e in events if isinstance(e.body, TurnComplete)]
                assert len(calls) <= len(agent.model.requests)
                check_history(agent.history(sid))
