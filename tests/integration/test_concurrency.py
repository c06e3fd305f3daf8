"""Many sessions at once (docs/architecture.md; docs/protocol.md, "Turns and events"): 50 sessions each run a turn with
a local tool round (`read` of its own file), a hosted round (its own hosted tool) and a final answer, all concurrently.
The fake model answers by looking at each request, so any cross-talk between sessions shows up in what the model is sent
or in what a session's final answer says."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, RecordedRequest, Reply, ReplyLike, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, create_session, events_after, stream_turn

SESSIONS = 50
MARKER = re.compile(r"MARK-\d{3}-X")
SCHEMA_JSON = '{"type":"object","properties":{"marker":{"type":"string"}},"required":["marker"]}'


def marker(index: int) -> str:
    return f"MARK-{index:03d}-X"


def index_of(text: str) -> int:
    found = MARKER.search(text)
    assert found is not None, text
    return int(found.group(0)[5:8])


def tool_results(message: dict[str, Any]) -> dict[str, str]:
    """tool_use_id → result text of the tool_result blocks of one user message."""
    out = {}
    for block in message.get("content", []):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
            out[str(block["tool_use_id"])] = str(content)
    return out


def responder(request: RecordedRequest) -> ReplyLike:
    first = request.messages[0]["content"]
    first_text = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    i = index_of(first_text)
    results = tool_results(request.messages[-1]) if request.messages[-1]["role"] == "user" else {}
    if f"toolu_read_{i:03d}" in results:
        return Reply(
            blocks=[ToolUseBlock(id=f"toolu_host_{i:03d}", name=f"lookup_{i:03d}", input={"marker": marker(i)})]
        )
    if f"toolu_host_{i:03d}" in results:
        return TextReply(f"final for {marker(i)}: {results[f'toolu_host_{i:03d}']}")
    return Reply(blocks=[ToolUseBlock(id=f"toolu_read_{i:03d}", name="read", input={"path": f"own-{i:03d}.txt"})])


@pytest.fixture
async def env(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[tuple[Stub, Path]]:
    root = tmp_path / "workspaces"
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(root)})
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel), root


async def one_session(stub: Stub, root: Path, i: int) -> tuple[str, list[Any]]:
    session = await create_session(
        stub,
        identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING),
        hosted_tools=[
            hosted_tool_pb2.HostedToolDefinition(
                name=f"lookup_{i:03d}", description="session-specific host tool", input_schema_json=SCHEMA_JSON
            )
        ],
    )
    sid = session.identity.session_id
    workspace = root / "default" / sid
    workspace.mkdir(parents=True)
    (workspace / f"own-{i:03d}.txt").write_text(f"file content of {marker(i)}\n")
    turn = await stream_turn(stub, sid, f"Work on {marker(i)}, please.")
    suspended = last_of(turn, "run_finished")
    assert suspended.outcome == event_pb2.RUN_OUTCOME_SUSPENDED, (i, kinds(turn))
    read_result = last_of(turn, "tool_result")
    assert read_result.tool_name == "read"
    assert marker(i) in read_result.output[0].text.text
    hosted = last_of(turn, "hosted_tool_call")
    assert (hosted.call_id, hosted.tool_name) == (f"toolu_host_{i:03d}", f"lookup_{i:03d}")
    assert hosted.input_json == f'{{"marker":"{marker(i)}"}}'
    request = turn_api.SubmitHostedToolResultRequest(
        session_id=sid, call_id=hosted.call_id, output_json=f'"host says {marker(i)}"'
    )
    submitted = [r.event async for r in stub.SubmitHostedToolResult(request)]
    return sid, turn + submitted


async def test_fifty_sessions_with_local_and_hosted_rounds(env: tuple[Stub, Path], fake_model: FakeAnthropic) -> None:
    stub, root = env
    fake_model.responder = responder
    results = await asyncio.wait_for(asyncio.gather(*(one_session(stub, root, i) for i in range(SESSIONS))), timeout=25)
    session_ids = [sid for sid, _ in results]
    assert len(set(session_ids)) == SESSIONS
    for i, (sid, events) in enumerate(results):
        finished = last_of(events, "run_finished")
        assert finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED, (i, kinds(events))
        assert finished.usage.model_calls == 3
        assert text_of(events) == f"final for {marker(i)}: host says {marker(i)}"
        assert {e.session_id for e in events} == {sid}
        assert len({e.run_id for e in events}) == 1
        seqs = [e.sequence for e in events]
        assert all(a < b for a, b in itertools.pairwise(seqs)), (i, seqs)
        assert set(MARKER.findall(text_of(events))) == {marker(i)}
    # Every model request of session i mentions session i only: no cross-talk.
    requests = fake_model.requests
    assert len(requests) == 3 * SESSIONS
    per_session: dict[int, int] = {}
    for request in requests:
        found = set(MARKER.findall(request.raw_body.decode()))
        assert len(found) == 1, found
        (only,) = found
        per_session[index_of(only)] = per_session.get(index_of(only), 0) + 1
        tool_names = {t["name"] for t in request.tools}
        assert {n for n in tool_names if n.startswith("lookup_")} == {f"lookup_{index_of(only):03d}"}
    assert per_session == dict.fromkeys(range(SESSIONS), 3)
    # The final request of each session carries its own read output and its own hosted output.
    finals = set()
    for request in requests:
        i = index_of(request.raw_body.decode())
        results_sent = tool_results(request.messages[-1])
        if f"toolu_host_{i:03d}" in results_sent:
            finals.add(i)
            assert results_sent[f"toolu_host_{i:03d}"] == f"host says {marker(i)}"
            assert [m["role"] for m in request.messages] == ["user", "assistant", "user", "assistant", "user"]
            assert marker(i) in tool_results(request.messages[2])[f"toolu_read_{i:03d}"]
    assert finals == set(range(SESSIONS))
    # The durable log of each session agrees: strictly increasing, nothing of another session.
    for i in (0, SESSIONS // 2, SESSIONS - 1):
        sid, events = results[i]
        log = await events_after(stub, sid, 0, events[-1].sequence)
        seqs = [e.sequence for e in log]
        assert all(a < b for a, b in itertools.pairwise(seqs))
        assert {e.session_id for e in log} == {sid}
        assert text_of(log) == text_of(events)
