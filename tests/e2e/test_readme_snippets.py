"""Every fenced snippet of README.md (and of docs/*.md, when there is such a folder) runs as written against a
server started the way `make run` starts it: the `general-agent serve` console script (`make -n run` is checked to
be that command) with default settings, ANTHROPIC_BASE_URL pointed at the fake Anthropic server and a dummy key.

The snippets talk to 127.0.0.1:50051, the address `make run` listens on. The server here listens on a free port
instead (a fixed port would collide with a developer's own `make run` and with parallel test runs), so that one
string, and nothing else, is replaced with the server's address before a snippet runs.

How each kind of snippet runs:
- python: a program, run with the project's interpreter to completion (exit 0). One that hosts the `weather` tool
  gets a model that calls it; one that answers approvals (ResolveApproval, `on_approval=`) one that writes a file.
  A program that serves hooks (it builds a `HookServer`) runs until it is stopped, so it runs together with a
  counterpart: once its registration is listed, a turn whose model calls `exec` shows the hook's block reason as
  the tool error; then SIGTERM stops the host (exit 0, registration gone).
- sh: grpcurl, ghz and `general-agent` client commands run with bash from the repository root (`set -euo pipefail`).
  A block of `make` commands (the set-up block) is checked with `make -n`: running `make test` from a test would
  recurse.
- toml: a configuration file: the server starts with it (`--config`) and knows the auth profile it defines; one
  that configures tokens, client certificates, TLS or tenants is run by tests/e2e/snippet_trust.py.
- go: a `package main` program, written to a scratch directory inside the clients/go module (where
  clients/go/examples/ programs live) and run with `go run`; ts: a program written to a scratch directory inside
  clients/ts (beside examples/) and run with tsx. Both exit 0; one that answers approvals (`OnApproval` /
  `onApproval`) gets a model that calls `write` and the hosted `lookup`, and must print "Approve write?" and the
  outcome RUN_OUTCOME_COMPLETED; one that streams a turn prints the fake model's "ok".
A snippet of any other kind fails until a way to run it is added here: none is skipped silently."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, content_pb2, hook_registration_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.e2e.conftest import GO_CLIENT_DIR, REPO, TS_CLIENT_DIR, TSX, describe_run
from tests.e2e.snippet_trust import configures_trust, run_trust_toml
from tests.support.events import last_of
from tests.support.subprocess_server import ServerProcess, ServerProcesses

MAKE_RUN_ADDRESS = "127.0.0.1:50051"
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w+-]*)[ \t]*$")
RPC_TIMEOUT = 30.0
READY_TIMEOUT = 30.0


@dataclass(frozen=True)
class Snippet:
    document: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}:{self.language or 'plain'}"

    def against(self, address: str) -> str:
        """The code, talking to `address` instead of `make run`'s."""
        return self.code.replace(MAKE_RUN_ADDRESS, address)


def snippets(document: Path) -> list[Snippet]:
    """The fenced blocks of a Markdown file, each dedented by its fence's indentation (blocks in list items)."""
    found: list[Snippet] = []
    opening: tuple[int, re.Match[str]] | None = None
    body: list[str] = []
    for number, line in enumerate(document.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if opening is None:
            if fence is not None:
                opening, body = (number, fence), []
        elif fence is not None and fence["indent"] == opening[1]["indent"] and not fence["language"]:
            code = textwrap.dedent("\n".join(body)) + "\n"
            found.append(Snippet(document, opening[0], opening[1]["language"], code))
            opening = None
        else:
            body.append(line)
    assert opening is None, f"{document}:{opening[0]}: a fence is never closed"
    return found


ALL_SNIPPETS = [snippet for document in DOCUMENTS for snippet in snippets(document)]


@dataclass
class Servers:
    fake: FakeAnthropicThread
    root: Path
    processes: ServerProcesses

    def start(self, *, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> ServerProcess:
        server = self.processes.make(extra=env, extra_args=extra_args)
        server.start()
        return server


@pytest.fixture
def servers(tmp_path: Path, fake_model_thread: FakeAnthropicThread, server_processes: ServerProcesses) -> Servers:
    """Starts `general-agent serve` subprocesses on demand; every one is killed at the end (`server_processes`)."""
    return Servers(fake_model_thread, tmp_path, server_processes)


def run(command: list[str], *, cwd: Path, server: ServerProcess | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=client_env(), capture_output=True, text=True, timeout=90, check=False)
    assert result.returncode == 0, describe_run(result, server)
    return result


def client_env() -> dict[str, str]:
    """The snippet's environment: the test's, without anything that points at a real model or server."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("GENERAL_AGENT_", "ANTHROPIC_"))}


# ---------------------------------------------------------------------------------------------------- python


def run_python_program(snippet: Snippet, servers: Servers) -> None:
    server = servers.start()
    program = servers.root / "snippet.py"
    program.write_text(snippet.against(server.address))
    approves = "ResolveApproval" in snippet.code or "on_approval=" in snippet.code
    if approves:  # the model writes a file; the program approves it
        write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": "notes"})
        servers.fake.enqueue(Reply(blocks=[write], stop_reason="tool_use"), TextReply("written"))
    hosts_weather = '@client.hosted_tool("weather")' in snippet.code
    if hosts_weather:  # the model calls the program's hosted tool, then answers
        weather = ToolUseBlock(id="toolu_h", name="weather", input={"city": "Paris"})
        servers.fake.enqueue(Reply(blocks=[weather], stop_reason="tool_use"), TextReply("sunny"))

    # Run where a reader runs them: in the repository.
    result = run([sys.executable, str(program)], cwd=REPO, server=server)

    if "stream_turn" in snippet.code:
        assert result.stdout == "ok\n", describe_run(result, server)  # the fake model's reply, then a newline
    if approves:
        assert result.stdout == "Approve write?\nwritten\n", describe_run(result, server)
    if hosts_weather:
        assert result.stdout == "sunny\n", describe_run(result, server)
        assert "Paris" in str(servers.fake.requests[-1].body["messages"][-1]["content"]), server.log()
    if "GetMcpStatus" in snippet.code:
        assert result.stdout.startswith("MCP_SERVER_STATE_READY "), describe_run(result, server)


def listed_plugins(stub: agent_service_pb2_grpc.AgentServiceStub) -> list[str]:
    response = stub.ListHookRegistrations(hook_registration_pb2.ListHookRegistrationsRequest(), timeout=RPC_TIMEOUT)
    return [r.plugin_id for r in response.registrations]


def wait_until(condition: Callable[[], bool], host: subprocess.Popen[str], what: str) -> None:
    """Polls `condition` until it holds; fails if the host exits or READY_TIMEOUT passes first."""
    deadline = time.monotonic() + READY_TIMEOUT
    while not condition():
        if host.poll() is not None:
            stdout, stderr = host.communicate()
            raise AssertionError(f"the hook host exited ({host.returncode}) before {what}:\n{stdout}\n{stderr}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {READY_TIMEOUT}s")
        time.sleep(0.05)


def blocked_exec_error(stub: agent_service_pb2_grpc.AgentServiceStub, fake: FakeAnthropicThread) -> str:
    """A CODING turn whose model calls `exec`; the tool error the run reports."""
    fake.enqueue(
        Reply(blocks=[ToolUseBlock(id="t1", name="exec", input={"command": "echo hi"})], stop_reason="tool_use"),
        TextReply("understood"),
    )
    session = session_pb2.Session(identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING))
    created = stub.CreateSession(session_api.CreateSessionRequest(session=session), timeout=RPC_TIMEOUT)
    request = turn_api.StreamTurnRequest(
        session_id=created.session.identity.session_id,
        input=[content_pb2.ContentPart(text=content_pb2.TextPart(text="run something"))],
    )
    events = [response.event for response in stub.StreamTurn(request, timeout=RPC_TIMEOUT)]
    error: str = last_of(events, "tool_error").error
    return error


def run_python_hook_host(snippet: Snippet, servers: Servers) -> None:
    server = servers.start()  # default settings: the operator's hook host on loopback needs no allow-list
    program = servers.root / "hook_host.py"
    program.write_text(snippet.against(server.address))
    with (
        grpc.insecure_channel(server.address) as channel,
        subprocess.Popen(
            [sys.executable, str(program)],
            cwd=servers.root,
            env=client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as host,
    ):
        try:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            wait_until(lambda: listed_plugins(stub) == ["guard"], host, "registration")

            assert blocked_exec_error(stub, servers.fake) == "no shell here", server.log()

            host.send_signal(signal.SIGTERM)
            stdout, stderr = host.communicate(timeout=30)
            assert host.returncode == 0, f"{stdout}\n{stderr}"
            assert stdout.startswith("serving hooks on 127.0.0.1:"), stdout
            assert listed_plugins(stub) == []
        finally:
            if host.poll() is None:
                host.kill()


def run_python(snippet: Snippet, servers: Servers) -> None:
    if "HookServer(" in snippet.code:
        run_python_hook_host(snippet, servers)
    else:
        run_python_program(snippet, servers)


# ---------------------------------------------------------------------------------------------------- sh


def commands(snippet: Snippet) -> list[str]:
    """The snippet's command lines, comments dropped."""
    lines = (line.split(" #", 1)[0].strip() for line in snippet.code.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def run_sh(snippet: Snippet, servers: Servers) -> None:
    lines = commands(snippet)
    if all(line.split()[0] == "make" for line in lines):
        for line in lines:
            dry_run = run([*line.split()[:1], "-n", *line.split()[1:]], cwd=REPO)
            if line.split()[1:2] == ["run"]:
                assert ".venv/bin/general-agent serve" in dry_run.stdout, dry_run.stdout  # how the server starts here
        return
    runnable = (".bin/grpcurl ", ".bin/ghz ", ".venv/bin/general-agent ")
    assert all(line.startswith(runnable) for line in lines), f"{snippet.name}: cannot run {lines}"
    server = servers.start()

    result = run(["bash", "-euo", "pipefail", "-c", snippet.against(server.address)], cwd=REPO, server=server)

    assert result.stdout.strip(), describe_run(result, server)


# ---------------------------------------------------------------------------------------------------- toml


def run_toml(snippet: Snippet, servers: Servers) -> None:
    if configures_trust(snippet.code):
        run_trust_toml(snippet.code, servers.root, lambda args, env: servers.start(extra_args=args, env=env))
        return
    config = servers.root / "config.toml"
    config.write_text(snippet.code)
    variables = set(re.findall(r'api_key_env\s*=\s*"([^"]+)"', snippet.code))
    profiles = re.findall(r"^\[auth_profiles\.([\w-]+)\]", snippet.code, flags=re.MULTILINE)
    assert profiles, f"{snippet.name}: no auth profile to check"
    server = servers.start(extra_args=("--config", str(config)), env=dict.fromkeys(variables, "sk-ant-dummy"))

    with grpc.insecure_channel(server.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        for profile in profiles:
            session = session_pb2.Session(auth_profile_id=profile)
            created = stub.CreateSession(session_api.CreateSessionRequest(session=session), timeout=RPC_TIMEOUT)
            assert created.session.auth_profile_id == profile
        with pytest.raises(grpc.RpcError) as unknown:  # the check above can fail: an unknown profile is refused
            stub.CreateSession(
                session_api.CreateSessionRequest(session=session_pb2.Session(auth_profile_id="no-such-profile")),
                timeout=RPC_TIMEOUT,
            )
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ---------------------------------------------------------------------------------------------------- go, ts


def run_client_program(
    snippet: Snippet, servers: Servers, client_dir: Path, file_name: str, command: list[str]
) -> None:
    server = servers.start()
    approvals = "OnApproval" in snippet.code or "onApproval" in snippet.code
    if approvals:
        write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": "notes"})
        lookup = ToolUseBlock(id="toolu_l", name="lookup", input={"q": "go"})
        servers.fake.enqueue(Reply(blocks=[write, lookup], stop_reason="tool_use"), TextReply("written"))
    scratch = Path(tempfile.mkdtemp(prefix="_snippet-", dir=client_dir))  # `_`: never matched by ./...
    try:
        (scratch / file_name).write_text(snippet.against(server.address))
        result = run([*command, f"./{scratch.name}/{file_name}"], cwd=client_dir, server=server)
    finally:
        shutil.rmtree(scratch)
    if approvals:
        assert result.stdout.startswith("Approve write?\n"), describe_run(result, server)
        assert result.stdout.endswith("RUN_OUTCOME_COMPLETED\n"), describe_run(result, server)
        assert "written" in result.stdout, describe_run(result, server)
    else:
        assert result.stdout.startswith("ok\n"), describe_run(result, server)  # the fake model's reply
    if "no-such-session" in snippet.code:
        assert result.stdout.splitlines()[-1] in {"NotFound", "SESSION_NOT_FOUND"}, describe_run(result, server)


def run_go(snippet: Snippet, servers: Servers) -> None:
    run_client_program(snippet, servers, GO_CLIENT_DIR, "main.go", ["go", "run"])


def run_ts(snippet: Snippet, servers: Servers) -> None:
    run_client_program(snippet, servers, TS_CLIENT_DIR, "main.ts", [str(TSX)])


RUNNERS: dict[str, Callable[[Snippet, Servers], None]] = {
    "python": run_python,
    "sh": run_sh,
    "toml": run_toml,
    "go": run_go,
    "ts": run_ts,
}


def test_the_documents_have_snippets() -> None:
    assert {s.language for s in ALL_SNIPPETS} >= {"python", "sh", "toml", "go", "ts"}
    assert sum(s.language == "python" for s in ALL_SNIPPETS) >= 2


@pytest.mark.parametrize("snippet", ALL_SNIPPETS, ids=lambda s: s.name)
def test_snippet_runs_as_written(snippet: Snippet, servers: Servers) -> None:
    runner = RUNNERS.get(snippet.language)
    assert runner is not None, f"{snippet.name}: no way to run a {snippet.language!r} snippet yet; add one here"

    runner(snippet, servers)
