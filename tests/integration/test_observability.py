"""Metrics and traces (docs/observability.md) against a real server: /metrics on a port of its own shows RPC
latency by method and code, runs by outcome, model latency and tokens by model, tool calls by tool, hook
latency, active runs and store commits; with `tracing = "otlp"` one trace holds the turn's RPC, its model calls,
tools and hook handlers (a fake OTLP collector receives them); with both off nothing is attached."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import session_pb2
from tests.conftest import ServerFactory
from tests.support.otlp import Collector
from tests.support.otlp import collector as otlp_collector
from tests.support.rpc import connect, create_session, stream_turn

CODING = session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING)
MEMORY = session_pb2.MemoryConfig(enabled=True)


def sample(page: str, name: str, **labels: str) -> float:
    """The value of one series of a Prometheus text page (0 when absent)."""
    for line in page.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(2))
    return 0.0


async def a_turn_with_a_tool(address: str, fake_model: FakeAnthropic) -> None:
    fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="t1", name="glob", input={"pattern": "*"})]), TextReply("done"))
    async with connect(address) as stub:
        session = await create_session(stub, identity=CODING, memory=MEMORY)
        events = await stream_turn(stub, session.identity.session_id, "look around")
        assert events[-1].run_finished.outcome == 1  # COMPLETED


async def test_metrics_are_served_on_their_own_port(server_factory: ServerFactory, fake_model: FakeAnthropic) -> None:
    server = await server_factory({"GENERAL_AGENT_METRICS_LISTEN": "127.0.0.1:0"})
    await a_turn_with_a_tool(server.address, fake_model)
    async with httpx.AsyncClient() as client:
        page = (await client.get(f"http://{server.metrics_address}/metrics")).text
    rpc = "general_agent_rpc_duration_seconds_count"
    assert sample(page, rpc, method="/general_agent.v1.AgentService/StreamTurn", code="OK") == 1
    assert sample(page, rpc, method="/general_agent.v1.AgentService/CreateSession", code="OK") == 1
    assert sample(page, "general_agent_turns_total", outcome="COMPLETED") == 1
    model = "claude-sonnet-4-6"
    assert sample(page, "general_agent_model_call_duration_seconds_count", model=model, result="ok") == 2
    assert sample(page, "general_agent_model_tokens_total", model=model, kind="output") > 0
    assert sample(page, "general_agent_tool_call_duration_seconds_count", tool="glob", result="ok") == 1
    assert sample(page, "general_agent_hook_duration_seconds_count", hook="before_prompt_build") >= 1
    assert sample(page, "general_agent_store_commit_duration_seconds_count") > 0
    assert "general_agent_active_runs 0.0" in page
    assert "general_agent_queued_turns 0.0" in page


async def test_nothing_is_attached_when_both_are_off(server_factory: ServerFactory) -> None:
    server = await server_factory()
    assert server.metrics_address == ""
    assert server.observability.observer is None
    assert server.agent.hook_runner.observer is None


@pytest.fixture
async def collector(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Collector]:
    async with otlp_collector() as found:
        for name, value in found.env().items():
            monkeypatch.setenv(name, value)
        yield found


async def test_a_turn_is_one_trace(
    server_factory: ServerFactory, fake_model: FakeAnthropic, collector: Collector
) -> None:
    server = await server_factory({"GENERAL_AGENT_TRACING": "otlp"})
    await a_turn_with_a_tool(server.address, fake_model)
    tracing = server.observability.tracing
    assert tracing is not None
    # The exporter's blocking channel needs this loop (the collector's) free while it flushes.
    assert await asyncio.to_thread(tracing.provider.force_flush)
    by_name = {s.name: s for s in collector.spans}
    turn = by_name["/general_agent.v1.AgentService/StreamTurn"]
    names = {s.name for s in collector.spans if s.trace_id == turn.trace_id}
    assert {"model claude-sonnet-4-6", "tool glob", "hook before_prompt_build", "run_finished"} <= names
    model = by_name["model claude-sonnet-4-6"]
    assert model.parent_span_id == turn.span_id
    assert by_name["/general_agent.v1.AgentService/CreateSession"].trace_id != turn.trace_id
