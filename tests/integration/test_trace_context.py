"""Trace context sent out (docs/observability.md): with `tracing` on, each hook service call carries the W3C
`traceparent` of its hook span in gRPC metadata, and each MCP request of a tool call carries the one of its tool
span as an HTTP header, both in the turn's trace; with tracing off neither is sent. Real servers on loopback: a
recording hook host, and the test MCP server behind a recording ASGI wrapper; spans read from an in-memory
exporter added to the server's provider."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import mcp_pb2
from general_agent_server.app import RunningServer
from general_agent_server.observability import tracing
from tests.conftest import ServerFactory
from tests.support.hook_agent import open_agent
from tests.support.hook_host import wait_until
from tests.support.mcp_recording import RecordingServer, recording_mcp_server
from tests.support.otlp import collector as otlp_collector
from tests.support.rpc import connect, create_session, stream_turn

TRACING = {"GENERAL_AGENT_TRACING": "otlp"}
STREAM_TURN = "/general_agent.v1.AgentService/StreamTurn"


@pytest.fixture
async def collector(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """Where the server's OTLP exporter sends (the spans asserted on come from the in-memory exporter)."""
    async with otlp_collector() as found:
        for name, value in found.env().items():
            monkeypatch.setenv(name, value)
        yield


@pytest.fixture
def injections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every carrier the server hands the propagator (none at all when tracing is off: no propagator work)."""
    seen: list[object] = []
    monkeypatch.setattr(tracing, "inject", seen.append)
    return seen


@pytest.fixture
async def mcp_http() -> AsyncIterator[RecordingServer]:
    async with recording_mcp_server() as found:
        yield found


def record_spans(server: RunningServer) -> InMemorySpanExporter:
    tracing = server.observability.tracing
    assert tracing is not None
    exporter = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def parse_traceparent(value: str) -> tuple[int, int]:
    """(trace id, parent span id) of a W3C traceparent `00-<32 hex>-<16 hex>-<2 hex>`."""
    version, trace_id, span_id, flags = value.split("-")
    assert (version, len(trace_id), len(span_id), len(flags)) == ("00", 32, 16, 2), value
    return int(trace_id, 16), int(span_id, 16)


def ids(span: ReadableSpan) -> tuple[int, int]:
    """(trace id, span id) of a span."""
    context = span.context
    assert context is not None
    return context.trace_id, context.span_id


async def ended(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    """The span called `name`, once it has ended (a server span ends after its RPC's last message)."""
    await wait_until(lambda: any(s.name == name for s in exporter.get_finished_spans()))
    return next(s for s in exporter.get_finished_spans() if s.name == name)


async def test_hook_calls_carry_their_hook_span_s_trace_context(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path, collector: None
) -> None:
    async with open_agent(server_factory, tmp_path, TRACING) as agent:
        exporter = record_spans(agent.server)
        host = await agent.host()
        await agent.register("tracer", host.address, ("before_prompt_build", "before_tool_call"))
        fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="t1", name="glob", input={"pattern": "*"})]), TextReply("ok"))
        session = await create_session(agent.stub)
        events = await stream_turn(agent.stub, session.identity.session_id, "look around")
        assert events[-1].run_finished.outcome == 1  # COMPLETED
        turn = await ended(exporter, STREAM_TURN)
        for hook in ("before_prompt_build", "before_tool_call"):
            (call,) = host.of(hook)
            trace_id, parent_id = parse_traceparent(call.metadata["traceparent"])
            spans = [
                s
                for s in exporter.get_finished_spans()
                if s.name == f"hook {hook}" and (s.attributes or {}).get("general_agent.plugin_id") == "tracer"
            ]
            assert len(spans) == 1, [s.name for s in exporter.get_finished_spans()]
            assert trace_id == ids(turn)[0]
            assert (trace_id, parent_id) == ids(spans[0])
            assert call.metadata["x-request-id"]  # what was sent before is still sent


async def test_no_trace_context_reaches_hooks_when_tracing_is_off(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path, injections: list[object]
) -> None:
    async with open_agent(server_factory, tmp_path) as agent:
        assert agent.server.observability.tracing is None
        host = await agent.host()
        await agent.register("tracer", host.address, ("before_prompt_build", "before_tool_call"))
        fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="t1", name="glob", input={"pattern": "*"})]), TextReply("ok"))
        session = await create_session(agent.stub)
        await stream_turn(agent.stub, session.identity.session_id, "look around")
        assert host.of("before_prompt_build")
        assert host.of("before_tool_call")
        assert all("traceparent" not in call.metadata for call in host.calls)
        assert injections == []


async def a_turn_with_an_mcp_tool(server: RunningServer, fake_model: FakeAnthropic, url: str) -> None:
    async with connect(server.address) as stub:
        servers = {"web": mcp_pb2.McpServerConfig(http=mcp_pb2.McpHttpServer(url=url))}
        sid = (await create_session(stub, mcp_servers=servers)).identity.session_id
        fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="m1", name="echo", input={"text": "hi"})]), TextReply("ok"))
        events = await stream_turn(stub, sid, "call it")
        results = [e.tool_result for e in events if e.WhichOneof("event") == "tool_result"]
        assert [r.output[0].text.text for r in results] == ["echo: hi"]


async def test_mcp_tool_calls_carry_their_tool_span_s_trace_context(
    server_factory: ServerFactory, fake_model: FakeAnthropic, mcp_http: RecordingServer, collector: None
) -> None:
    server = await server_factory({**TRACING, "GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1"})
    exporter = record_spans(server)
    await a_turn_with_an_mcp_tool(server, fake_model, mcp_http.url)
    turn = await ended(exporter, STREAM_TURN)
    tool = await ended(exporter, "tool echo")
    (request,) = mcp_http.calls("tools/call")
    trace_id, parent_id = parse_traceparent(request.headers["traceparent"])
    assert trace_id == ids(turn)[0]
    assert (trace_id, parent_id) == ids(tool)


async def test_no_trace_context_reaches_mcp_servers_when_tracing_is_off(
    server_factory: ServerFactory, fake_model: FakeAnthropic, mcp_http: RecordingServer, injections: list[object]
) -> None:
    server = await server_factory({"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1"})
    await a_turn_with_an_mcp_tool(server, fake_model, mcp_http.url)
    assert mcp_http.calls("tools/call")
    assert all("traceparent" not in r.headers for r in mcp_http.seen)
    assert injections == []
