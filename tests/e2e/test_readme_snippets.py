"""Every fenced snippet of README.md and of docs/*.md runs as written against a server started the way `make run`
starts it: the `general-agent serve` console script (`make -n run` is checked to be that command) with default
settings, ANTHROPIC_BASE_URL pointed at the fake Anthropic server and a dummy key (tests/e2e/snippets.py finds the
snippets and points them at the server's address).

A snippet under a `<!-- snippet-task: NAME -->` marker (the per-capability pages) does that task, whatever its
language, and is run by tests/e2e/snippet_tasks.py. How each kind of snippet runs:
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
  clients/go/examples/ programs live), built and run; ts: a program written to a scratch directory inside
  clients/ts (beside examples/) and run with tsx. Both exit 0; one that answers approvals (`OnApproval` /
  `onApproval`) gets a model that calls `write` and the hosted `lookup`, and must print "Approve write?" and the
  outcome RUN_OUTCOME_COMPLETED; one that streams a turn prints the fake model's "ok".
  Every ts snippet also passes `tsc --noEmit` (strict) in one program (test_ts_snippets_type_check).
A snippet of any other kind fails until a way to run it is added here: none is skipped silently."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.e2e.conftest import REPO, TS_CLIENT_DIR, describe_run, require_file
from tests.e2e.snippet_tasks import run_hook_host, run_task
from tests.e2e.snippet_trust import configures_trust, run_trust_toml
from tests.e2e.snippets import ALL_SNIPPETS, Servers, Snippet, program, run
from tests.support.subprocess_server import ServerProcesses

RPC_TIMEOUT = 30.0
READY_TIMEOUT = 30.0


@pytest.fixture
def servers(tmp_path: Path, fake_model_thread: FakeAnthropicThread, server_processes: ServerProcesses) -> Servers:
    """Starts `general-agent serve` subprocesses on demand; every one is killed at the end (`server_processes`)."""
    return Servers(fake_model_thread, tmp_path, server_processes)


# ---------------------------------------------------------------------------------------------------- python


def run_python_program(snippet: Snippet, servers: Servers) -> None:
    server = servers.start()
    approves = "ResolveApproval" in snippet.code or "on_approval=" in snippet.code
    if approves:  # the model writes a file; the program approves it
        write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": "notes"})
        servers.fake.enqueue(Reply(blocks=[write], stop_reason="tool_use"), TextReply("written"))
    hosts_weather = '@client.hosted_tool("weather")' in snippet.code
    if hosts_weather:  # the model calls the program's hosted tool, then answers
        weather = ToolUseBlock(id="toolu_h", name="weather", input={"city": "Paris"})
        servers.fake.enqueue(Reply(blocks=[weather], stop_reason="tool_use"), TextReply("sunny"))

    with program(snippet, server.address, servers.root) as snippet_program:
        result = run(snippet_program.command, cwd=snippet_program.cwd, server=server)

    if "stream_turn" in snippet.code:
        assert result.stdout == "ok\n", describe_run(result, server)  # the fake model's reply, then a newline
    if approves:
        assert result.stdout == "Approve write?\nwritten\n", describe_run(result, server)
    if hosts_weather:
        assert result.stdout == "sunny\n", describe_run(result, server)
        assert "Paris" in str(servers.fake.requests[-1].body["messages"][-1]["content"]), server.log()
    if "GetMcpStatus" in snippet.code:
        assert result.stdout.startswith("MCP_SERVER_STATE_READY "), describe_run(result, server)


def run_python(snippet: Snippet, servers: Servers) -> None:
    if "HookServer(" in snippet.code:
        run_hook_host(snippet, servers)
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


def run_client_program(snippet: Snippet, servers: Servers) -> None:
    server = servers.start()
    approvals = "OnApproval" in snippet.code or "onApproval" in snippet.code
    if approvals:
        write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": "notes"})
        lookup = ToolUseBlock(id="toolu_l", name="lookup", input={"q": "go"})
        servers.fake.enqueue(Reply(blocks=[write, lookup], stop_reason="tool_use"), TextReply("written"))
    with program(snippet, server.address, servers.root) as snippet_program:
        result = run(snippet_program.command, cwd=snippet_program.cwd, server=server)
    if approvals:
        assert result.stdout.startswith("Approve write?\n"), describe_run(result, server)
        assert result.stdout.endswith("RUN_OUTCOME_COMPLETED\n"), describe_run(result, server)
        assert "written" in result.stdout, describe_run(result, server)
    else:
        assert result.stdout.startswith("ok\n"), describe_run(result, server)  # the fake model's reply
    if "no-such-session" in snippet.code:
        assert result.stdout.splitlines()[-1] in {"NotFound", "SESSION_NOT_FOUND"}, describe_run(result, server)


RUNNERS: dict[str, Callable[[Snippet, Servers], None]] = {
    "python": run_python,
    "sh": run_sh,
    "toml": run_toml,
    "go": run_client_program,
    "ts": run_client_program,
}


def test_the_documents_have_snippets() -> None:
    assert {s.language for s in ALL_SNIPPETS} >= {"python", "sh", "toml", "go", "ts"}
    assert sum(s.language == "python" for s in ALL_SNIPPETS) >= 2


def test_ts_snippets_type_check(tmp_path: Path) -> None:
    """Every TypeScript snippet passes `tsc --noEmit` under clients/ts/tsconfig.json (strict), where it is run:
    a scratch folder inside clients/ts, so `../src/agent.js` resolves as it does for a reader's examples/ file."""
    typescript = [s for s in ALL_SNIPPETS if s.language == "ts"]
    assert len(typescript) >= 8, [s.name for s in typescript]
    scratch = Path(tempfile.mkdtemp(prefix="_snippet-types-", dir=TS_CLIENT_DIR))
    try:
        for number, snippet in enumerate(typescript):
            (scratch / f"snippet{number}.ts").write_text(f"// {snippet.name}\n{snippet.code}")
        config = {"extends": "../tsconfig.json", "include": ["*.ts"]}
        (scratch / "tsconfig.json").write_text(json.dumps(config))
        tsc = require_file(TS_CLIENT_DIR / "node_modules" / ".bin" / "tsc", "tsc (clients/ts/node_modules/.bin/tsc)")
        result = subprocess.run(
            [str(tsc), "--noEmit", "--listFiles", "-p", scratch.name],
            cwd=TS_CLIENT_DIR,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        shutil.rmtree(scratch)

    assert result.returncode == 0, describe_run(result)
    checked = [line for line in result.stdout.splitlines() if f"/{scratch.name}/snippet" in line]
    assert len(checked) == len(typescript), result.stdout  # every snippet was part of the program


@pytest.mark.parametrize("snippet", ALL_SNIPPETS, ids=lambda s: s.name)
def test_snippet_runs_as_written(snippet: Snippet, servers: Servers) -> None:
    if snippet.task is not None:
        run_task(snippet, servers)
        return
    runner = RUNNERS.get(snippet.language)
    assert runner is not None, f"{snippet.name}: no way to run a {snippet.language!r} snippet yet; add one here"

    runner(snippet, servers)
