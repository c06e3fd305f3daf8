"""The per-capability pages (docs/hosted-tools.md, docs/run-session.md, docs/hook-hosts.md, docs/checkpoints.md,
docs/errors.md, docs/cli.md) show one task in each language; a `<!-- snippet-task: NAME -->` marker names it.
Every snippet of a task, Python, Go, TypeScript or a grpcurl script alike, runs against a fresh server whose fake
model answers as TASKS[NAME] scripts, and must print exactly TASKS[NAME].stdout; its `check` then looks at what
the run left behind (the model's requests, the workspace), so a snippet cannot pass by printing alone.

A hook-host task's snippet serves hooks until it is stopped: once its registration `guard` is listed, a turn
whose model calls `exec` must show the hook's block reason as the tool error; SIGTERM must then stop it (exit 0,
registration gone). The same runner serves README.md's Python hook host."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from general_agent.testing import FakeAnthropicThread, Reply, ReplyLike, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, content_pb2, hook_registration_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.e2e.conftest import REPO, describe_run
from tests.e2e.snippets import Servers, Snippet, client_env, program, run
from tests.support.events import last_of
from tests.support.subprocess_server import ServerProcess

RPC_TIMEOUT = 30.0
READY_TIMEOUT = 30.0
# What a task's shell snippet may run: grpcurl and the CLI, with jq to pick fields and build requests.
SHELL_PROGRAMS = (".bin/grpcurl", ".venv/bin/general-agent", "jq", "echo")
HEREDOC = re.compile(r"<<-?'?(?P<word>\w+)'?")
ASSIGNMENT = re.compile(r"^\w+=\$?$|^\w+=[^$(]")

Check = Callable[[FakeAnthropicThread, ServerProcess], None]


@dataclass(frozen=True)
class Task:
    replies: Callable[[], list[ReplyLike]]  # the fake model's answers, in order ("ok" after them)
    stdout: tuple[str, ...] = ()  # every line the snippet prints
    check: Check | None = None
    hook_host: bool = False


def tool_use(name: str, **arguments: object) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=f"toolu_{name}", name=name, input=arguments)], stop_reason="tool_use")


def last_tool_result(fake: FakeAnthropicThread) -> str:
    """The tool results the model got in its last request, as text."""
    return str(fake.requests[-1].body["messages"][-1]["content"])


def weather_answered(fake: FakeAnthropicThread, server: ServerProcess) -> None:
    result = last_tool_result(fake)
    assert "21" in result, f"the hosted result did not reach the model: {result}"
    assert "is_error" not in result, result


def notes_rewound(fake: FakeAnthropicThread, server: ServerProcess) -> None:
    assert fake.requests, server.log()
    assert not list(server.state_dir.rglob("notes.txt")), "RestoreCheckpoint left notes.txt in the workspace"


TASKS: dict[str, Task] = {
    "hosted-weather": Task(
        replies=lambda: [tool_use("weather", city="Paris"), TextReply("sunny")],
        stdout=("sunny",),
        check=weather_answered,
    ),
    "run-session": Task(replies=lambda: [TextReply("hello")], stdout=("hello", "COMPLETED")),
    "hook-host": Task(replies=list, hook_host=True),
    "hook-registration": Task(replies=list, stdout=("guard", "unregistered")),
    "checkpoints": Task(
        replies=lambda: [tool_use("write", path="notes.txt", content="draft"), TextReply("written")],
        stdout=("write notes.txt", "restored notes.txt"),
        check=notes_rewound,
    ),
    "cli-sessions": Task(replies=list, stdout=("docs-demo",)),
    "errors": Task(replies=list, stdout=("SESSION_NOT_FOUND", "session.hosted_tools[0].name")),
}


def shell_commands(code: str) -> list[str]:
    """The program each command of a shell snippet runs (every command of every pipeline and substitution),
    heredoc bodies and comments dropped; words are split as the shell splits them, quotes kept together."""
    found: list[str] = []
    heredoc: str | None = None
    for line in code.splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if opened := HEREDOC.search(line):
            heredoc = opened["word"]
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        expect_command, after_redirect = True, False
        for token in lexer:
            if after_redirect:  # a redirection's target, not a command
                after_redirect = False
            elif token in {">", ">>", "<", "<<", "<<<", ">&", "2>"}:
                after_redirect = True
            elif all(c in "|&;()$" for c in token):
                expect_command = True
            elif expect_command and not ASSIGNMENT.match(token):
                found.append(token)
                expect_command = False
    return found


def run_task(snippet: Snippet, servers: Servers) -> None:
    assert snippet.task in TASKS, f"{snippet.name}: no task {snippet.task!r} in tests/e2e/snippet_tasks.py"
    task = TASKS[snippet.task]
    if task.hook_host:
        run_hook_host(snippet, servers)
        return
    server = servers.start()
    servers.fake.enqueue(*task.replies())
    if snippet.language == "sh":
        for command in shell_commands(snippet.code):
            assert command in SHELL_PROGRAMS, f"{snippet.name}: cannot run {command!r}"
        script = snippet.against(server.address)
        result = run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, server=server)
    else:
        with program(snippet, server.address, servers.root) as snippet_program:
            result = run(snippet_program.command, cwd=snippet_program.cwd, server=server)
    assert tuple(result.stdout.splitlines()) == task.stdout, describe_run(result, server)
    if task.check is not None:
        task.check(servers.fake, server)


# ---------------------------------------------------------------------------------------------------- hook hosts


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
    fake.enqueue(tool_use("exec", command="echo hi"), TextReply("understood"))
    session = session_pb2.Session(identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING))
    created = stub.CreateSession(session_api.CreateSessionRequest(session=session), timeout=RPC_TIMEOUT)
    request = turn_api.StreamTurnRequest(
        session_id=created.session.identity.session_id,
        input=[content_pb2.ContentPart(text=content_pb2.TextPart(text="run something"))],
    )
    events = [response.event for response in stub.StreamTurn(request, timeout=RPC_TIMEOUT)]
    error: str = last_of(events, "tool_error").error
    return error


def drive_hook_host(
    command: list[str], cwd: Path, server: ServerProcess, fake: FakeAnthropicThread, plugin_id: str
) -> None:
    """Runs a hook host that blocks `exec` ("no shell here") until its registration `plugin_id` is listed, checks
    the block reaches a turn's tool error, then stops it with SIGTERM: exit 0, registration gone."""
    with (
        grpc.insecure_channel(server.address) as channel,
        subprocess.Popen(
            command, cwd=cwd, env=client_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as host,
    ):
        try:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            wait_until(lambda: listed_plugins(stub) == [plugin_id], host, "registration")

            assert blocked_exec_error(stub, fake) == "no shell here", server.log()

            host.send_signal(signal.SIGTERM)
            stdout, stderr = host.communicate(timeout=30)
            assert host.returncode == 0, f"{stdout}\n{stderr}"
            assert stdout.startswith("serving hooks on 127.0.0.1:"), stdout
            assert listed_plugins(stub) == []
        finally:
            if host.poll() is None:
                host.kill()


def run_hook_host(snippet: Snippet, servers: Servers) -> None:
    server = servers.start()  # default settings: the operator's hook host on loopback needs no allow-list
    with program(snippet, server.address, servers.root) as host:
        drive_hook_host(host.command, host.cwd, server, servers.fake, "guard")
