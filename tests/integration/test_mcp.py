"""MCP servers of a session over gRPC: stdio and streamable HTTP through the `mcp` SDK (the in-repo test server
and npm's @modelcontextprotocol/server-everything), their tools in turns of the fake model, result shapes,
collision naming, status and toggles, masking of secrets, failure isolation, restart after a crash, a hanging
server, persistence, and no stdio process left behind."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import mcp_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.app import RunningServer
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.mcp_server import free_port, processes_tagged
from tests.support.rpc import Stub, connect, create_session, rpc_error, stream_turn

REPO = Path(__file__).parents[2]
EVERYTHING = REPO / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
READY = mcp_pb2.MCP_SERVER_STATE_READY
FAILED = mcp_pb2.MCP_SERVER_STATE_FAILED


def stdio(tag: str = "", **env: str) -> mcp_pb2.McpServerConfig:
    args = ["-m", "tests.support.mcp_server", "stdio", *(["--tag", tag] if tag else [])]
    return mcp_pb2.McpServerConfig(
        stdio=mcp_pb2.McpStdioServer(command=sys.executable, args=args, cwd=str(REPO), env=env)
    )


def http(url: str, **headers: str) -> mcp_pb2.McpServerConfig:
    return mcp_pb2.McpServerConfig(http=mcp_pb2.McpHttpServer(url=url, headers=headers))


def call(name: str, arguments: dict[str, Any], *, call_id: str) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name=name, input=arguments)])


def tool_names(fake: FakeAnthropic) -> list[str]:
    return [t["name"] for t in fake.requests[-1].tools]


async def status(stub: Stub, sid: str) -> dict[str, mcp_pb2.McpServerStatus]:
    answer = await stub.GetMcpStatus(mcp_pb2.GetMcpStatusRequest(session_id=sid))
    return {s.server_name: s for s in answer.statuses}


async def wait_state(stub: Stub, sid: str, name: str, state: int) -> mcp_pb2.McpServerStatus:
    for _ in range(500):
        current = (await status(stub, sid))[name]
        if current.state == state:
            return current
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never reached state {state}: {current}")


def wait_listening(port: int) -> None:
    for _ in range(300):
        with socket.socket() as probe:
            # A probe of a free port in the ephemeral range can connect to itself (TCP simultaneous open): that
            # is not the server listening.
            if probe.connect_ex(("127.0.0.1", port)) == 0 and probe.getsockname() != probe.getpeername():
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def http_server() -> Iterator[str]:
    """The test server over streamable HTTP, requiring `Authorization: Bearer s3cret-token-123`."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "tests.support.mcp_server",
        "http",
        "--port",
        str(port),
        "--token",
        "s3cret-token-123",
    ]
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@pytest.fixture
async def served(server: RunningServer) -> AsyncIterator[Stub]:
    async with connect(server.address) as stub:
        yield stub


async def test_a_stdio_server_s_tools_join_the_turn(served: Stub, fake_model: FakeAnthropic) -> None:
    stub = served
    sid = (await create_session(stub, mcp_servers={"test": stdio()})).identity.session_id
    fake_model.enqueue(
        call("echo", {"text": "hi"}, call_id="m1"),
        call("add", {"a": 2, "b": 3}, call_id="m2"),
        call("picture", {}, call_id="m3"),
        call("fail", {"reason": "nope"}, call_id="m4"),
        TextReply("done"),
    )
    events = await stream_turn(stub, sid, "use the tools")
    offered = tool_names(fake_model)
    results = [e for e in events if e.WhichOneof("event") in ("tool_result", "tool_error")]
    assert last_of(events, "run_finished").outcome == 1  # COMPLETED
    assert {"echo", "add", "picture", "fail", "slow", "crash", "test__read", "read"} <= set(offered)
    assert results[0].tool_result.output[0].text.text == "echo: hi"
    assert json.loads(results[1].tool_result.details_json) == {"sum": 5}
    assert results[2].tool_result.output[0].image.mime_type == "image/png"
    assert results[3].WhichOneof("event") == "tool_error"
    assert "nope" in results[3].tool_error.error
    assert (await status(stub, sid))["test"].tool_count == 7


async def test_the_reference_server_over_stdio(served: Stub, fake_model: FakeAnthropic) -> None:
    stub = served
    server = mcp_pb2.McpServerConfig(stdio=mcp_pb2.McpStdioServer(command="node", args=[str(EVERYTHING), "stdio"]))
    sid = (await create_session(stub, mcp_servers={"everything": server})).identity.session_id
    fake_model.enqueue(
        call("echo", {"message": "hello"}, call_id="e1"),
        call("get-sum", {"a": 2, "b": 40}, call_id="e2"),
        TextReply("ok"),
    )
    events = await stream_turn(stub, sid, "echo and add")
    texts = [e.tool_result.output[0].text.text for e in events if e.WhichOneof("event") == "tool_result"]
    assert texts[0] == "Echo: hello"
    assert "42" in texts[1]


async def test_toggle_status_and_masked_reads(served: Stub, fake_model: FakeAnthropic) -> None:
    stub = served
    sid = (await create_session(stub, mcp_servers={"test": stdio(API_TOKEN="env-secret-456")})).identity.session_id
    assert (await wait_state(stub, sid, "test", READY)).tool_count == 7
    off = await stub.ToggleMcpServer(mcp_pb2.ToggleMcpServerRequest(session_id=sid, server_name="test", enabled=False))
    assert off.status.state == mcp_pb2.MCP_SERVER_STATE_DISABLED
    fake_model.enqueue(TextReply("no tools of it"))
    await stream_turn(stub, sid, "hi")
    assert "echo" not in tool_names(fake_model)
    await stub.ToggleMcpServer(mcp_pb2.ToggleMcpServerRequest(session_id=sid, server_name="test", enabled=True))
    fake_model.enqueue(TextReply("back"))
    await stream_turn(stub, sid, "again")
    assert "echo" in tool_names(fake_model)
    unknown = await rpc_error(
        stub.ToggleMcpServer(mcp_pb2.ToggleMcpServerRequest(session_id=sid, server_name="nope", enabled=True))
    )
    assert (unknown.code, unknown.reason) == (grpc.StatusCode.NOT_FOUND, "MCP_SERVER_NOT_FOUND")
    servers = await stub.GetMcpServers(mcp_pb2.GetMcpServersRequest(session_id=sid))
    session = (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
    assert dict(servers.servers["test"].stdio.env) == {"API_TOKEN": "****"}
    assert dict(session.mcp_servers["test"].stdio.env) == {"API_TOKEN": "****"}
    assert "env-secret-456" not in str(servers) + str(session)


async def test_an_http_server_with_headers_and_a_wrong_token(
    served: Stub, fake_model: FakeAnthropic, http_server: str
) -> None:
    stub = served
    servers = {"web": http(http_server, Authorization="Bearer s3cret-token-123"), "bad": http(http_server)}
    sid = (await create_session(stub, mcp_servers=servers)).identity.session_id
    fake_model.enqueue(call("echo", {"text": "over http"}, call_id="h1"), TextReply("ok"))
    events = await stream_turn(stub, sid, "call it")
    states = await status(stub, sid)
    states["bad"] = await wait_state(stub, sid, "bad", FAILED)
    assert events[[e.WhichOneof("event") for e in events].index("tool_result")].tool_result.output[0].text.text == (
        "echo: over http"
    )
    # The two servers share tool names, so both are prefixed; only the one that connected is offered.
    assert "web__echo" in tool_names(fake_model) or "echo" in tool_names(fake_model)
    assert states["web"].state == READY
    assert states["bad"].state == FAILED
    assert states["bad"].error
    assert "s3cret-token-123" not in str(states)


async def test_a_crashed_server_fails_its_tool_and_restarts_at_next_use(
    served: Stub, fake_model: FakeAnthropic
) -> None:
    stub = served
    sid = (await create_session(stub, mcp_servers={"test": stdio()})).identity.session_id
    fake_model.enqueue(call("crash", {}, call_id="c1"), TextReply("it died"))
    crashed = await stream_turn(stub, sid, "crash it")
    error = next(e.tool_error for e in crashed if e.WhichOneof("event") == "tool_error")
    assert "crash" in error.error
    # The model call after the crash started the server again.
    assert (await status(stub, sid))["test"].state == READY
    fake_model.enqueue(call("echo", {"text": "again"}, call_id="c2"), TextReply("alive"))
    events = await stream_turn(stub, sid, "and now")
    assert [e.tool_result.output[0].text.text for e in events if e.WhichOneof("event") == "tool_result"] == [
        "echo: again"
    ]


async def test_a_hanging_server_does_not_hold_the_turn(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    port = free_port()
    command = [sys.executable, "-m", "tests.support.mcp_server", "http", "--port", str(port), "--hang"]
    hanging = subprocess.Popen(command, cwd=REPO)
    try:
        wait_listening(port)
        server = await server_factory({"GENERAL_AGENT_MCP_CONNECT_TIMEOUT": "3"})
        async with connect(server.address) as stub:
            servers = {"slow": http(f"http://127.0.0.1:{port}/mcp"), "test": stdio()}
            sid = (await create_session(stub, mcp_servers=servers)).identity.session_id
            fake_model.enqueue(TextReply("went on"))
            events = await stream_turn(stub, sid, "hi")
            offered = tool_names(fake_model)
    finally:
        hanging.kill()
        hanging.wait()
    assert last_of(events, "run_finished").outcome == 1
    assert "echo" in offered  # the server that is ready still offers its tools


async def test_no_stdio_process_outlives_delete_reset_or_shutdown(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory()
    tags = [uuid.uuid4().hex for _ in range(3)]
    async with connect(server.address) as stub:
        sids = []
        for tag in tags:
            sid = (await create_session(stub, mcp_servers={"test": stdio(tag)})).identity.session_id
            await wait_state(stub, sid, "test", READY)
            assert processes_tagged(tag)
            sids.append(sid)
        await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sids[0]))
        await stub.ResetSession(session_api.ResetSessionRequest(session_id=sids[1]))
        assert processes_tagged(tags[0]) == []
        assert processes_tagged(tags[1]) == []
    await server.stop()
    assert processes_tagged(tags[2]) == []


async def test_servers_persist_and_set_replaces_the_map(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    state = tmp_path / "mcp-state"
    server = await server_factory(state_dir=state)
    async with connect(server.address) as stub:
        sid = (await create_session(stub, mcp_servers={"a": stdio(), "b": stdio()})).identity.session_id
        await stub.ToggleMcpServer(mcp_pb2.ToggleMcpServerRequest(session_id=sid, server_name="b", enabled=False))
        await stub.SetMcpServers(mcp_pb2.SetMcpServersRequest(session_id=sid, servers={"a": stdio(), "c": stdio()}))
    await server.stop()
    restarted = await server_factory(state_dir=state)
    async with connect(restarted.address) as stub:
        servers = await stub.GetMcpServers(mcp_pb2.GetMcpServersRequest(session_id=sid))
        fake_model.enqueue(call("a__echo", {"text": "x"}, call_id="p1"), TextReply("ok"))
        events = await stream_turn(stub, sid, "after the restart")
    assert sorted(servers.servers) == ["a", "c"]
    assert list(servers.disabled_servers) == []  # b's marker went with b
    assert "a__echo" in tool_names(fake_model)
    assert any(e.WhichOneof("event") == "tool_result" for e in events)


async def test_bad_configurations_are_refused_with_the_field(served: Stub) -> None:
    stub = served
    cases: list[tuple[dict[str, Any], str]] = [
        ({"mcp_servers": {"x": mcp_pb2.McpServerConfig()}}, "session.mcp_servers['x']"),
        ({"mcp_servers": {"x": http("ftp://nowhere")}}, "session.mcp_servers['x'].http.url"),
        ({"mcp_servers": {"bad name!": stdio()}}, "session.mcp_servers['bad name!']"),
        ({"disabled_mcp_servers": ["ghost"]}, "session.disabled_mcp_servers"),
    ]
    for fields, where in cases:
        error = await rpc_error(create_session(stub, **fields))
        assert (error.code, error.field_violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, where), fields
    session = session_pb2.Session()
    assert not session.mcp_servers
