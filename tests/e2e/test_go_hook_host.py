"""The Go hook host (clients/go/cmd/hookhost) against a live `general-agent serve` subprocess: it registers
itself, the server dials it back for before_tool_call, its block reason reaches the model as the `read`
tool's error, and on SIGTERM it unregisters and exits 0."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, content_pb2, hook_registration_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.e2e.conftest import build_go_command
from tests.support.events import kinds, last_of
from tests.support.subprocess_server import ServerProcess

READY_TIMEOUT = 30.0
RPC_TIMEOUT = 30.0


@pytest.fixture(scope="session")
def go_hookhost_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/go/cmd/hookhost, built once per test session."""
    return build_go_command(tmp_path_factory, "hookhost")


@dataclass
class HookHost:
    """The running Go host; its stdout lines arrive on a queue so waits can be bounded."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    stdout: list[str] = field(default_factory=list)

    def pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of output: the process is exiting

    def next_line(self, deadline: float) -> str:
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"hookhost printed nothing more within its time; so far: {self.stdout}") from None
        if line is None:
            raise AssertionError(f"hookhost exited ({self.process.poll()}) after printing {self.stdout}")
        self.stdout.append(line)
        return line

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()


@pytest.fixture
def go_hook_host(go_hookhost_binary: Path, server_process: ServerProcess) -> Iterator[HookHost]:
    """The Go host, started against the server and ready (registered); killed at teardown if still running.

    The server has default settings: the Go host registers a loopback target, which the operator (every
    caller, without authentication) may do without an SSRF allow-list."""
    command = [str(go_hookhost_binary), "-addr", server_process.address]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8"
    ) as process:
        host = HookHost(process)
        pump = threading.Thread(target=host.pump, daemon=True)
        pump.start()
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            address = host.next_line(deadline)
            assert address.startswith("address 127.0.0.1:"), host.stdout
            assert host.next_line(deadline) == "ready", f"{host.stdout}\n{server_process.log()}"
            yield host
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            pump.join(timeout=10)  # the pipes close when the with-block ends; the pump must be done with stdout


def registrations(stub: agent_service_pb2_grpc.AgentServiceStub) -> list[hook_registration_pb2.HookRegistration]:
    response = stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest(), timeout=RPC_TIMEOUT)
    return list(response.registrations)


def test_go_host_blocks_read_and_unregisters_on_sigterm(
    go_hook_host: HookHost, server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    fake_model_thread.enqueue(
        Reply(blocks=[ToolUseBlock(id="t1", name="read", input={"path": "notes.txt"})], stop_reason="tool_use"),
        TextReply("understood"),
    )
    with grpc.insecure_channel(server_process.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        [registration] = registrations(stub)
        assert registration.plugin_id == "go-host"
        assert [b.name for b in registration.hooks] == [hook_registration_pb2.HOOK_NAME_BEFORE_TOOL_CALL]

        created = stub.CreateSession(
            session_api.CreateSessionRequest(session=session_pb2.Session()), timeout=RPC_TIMEOUT
        )
        request = turn_api.StreamTurnRequest(
            session_id=created.session.identity.session_id,
            input=[content_pb2.ContentPart(text=content_pb2.TextPart(text="read my notes"))],
        )
        events = [response.event for response in stub.StreamTurn(request, timeout=RPC_TIMEOUT)]

        assert kinds(events)[:5] == ["run_started", "usage_snapshot", "tool_call", "tool_error", "turn_complete"]
        assert last_of(events, "tool_error").error == "blocked by go host", server_process.log()
        requests = fake_model_thread.wait_for_requests(2, timeout=5.0)
        tool_result = requests[1].messages[-1]["content"][0]
        assert (tool_result["type"], tool_result["is_error"]) == ("tool_result", True)
        assert "blocked by go host" in str(tool_result["content"])

        go_hook_host.process.terminate()
        assert go_hook_host.process.wait(timeout=20) == 0, go_hook_host.stderr()
        assert registrations(stub) == []  # a host leaving for good takes its fail-closed hook with it
