"""The programs in clients/python/examples run as a host would run them, against a live `general-agent serve`
subprocess whose model is the scripted fake: the chat loop, the hosted tool and the hook server."""

from __future__ import annotations

import subprocess
import sys

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from tests.e2e.conftest import REPO, describe_run
from tests.e2e.snippet_tasks import drive_hook_host
from tests.e2e.snippets import client_env
from tests.support.subprocess_server import ServerProcess

EXAMPLES = REPO / "clients" / "python" / "examples"


def run_example(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin,
        env=client_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_examples_are_all_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == ["chat_loop.py", "hook_server.py", "hosted_tool.py"]


def test_chat_loop(server_process: ServerProcess, fake_model_thread: FakeAnthropicThread) -> None:
    fake_model_thread.enqueue(TextReply("Hello!", chunks=["Hel", "lo!"]), TextReply("Bye."))

    result = run_example("chat_loop.py", server_process.address, stdin="hi\n\nsee you\n")

    assert result.returncode == 0, describe_run(result, server_process)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("session ")
    assert lines[1:] == ["Hello!", "Bye."], describe_run(result, server_process)
    second = fake_model_thread.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]  # one session, the history kept


def test_hosted_tool(server_process: ServerProcess, fake_model_thread: FakeAnthropicThread) -> None:
    fake_model_thread.enqueue(
        Reply(blocks=[ToolUseBlock(id="w1", name="weather", input={"city": "Paris"})]),
        TextReply("Clear, 21 °C."),
    )

    result = run_example("hosted_tool.py", server_process.address)

    assert result.returncode == 0, describe_run(result, server_process)
    assert result.stdout.splitlines() == ["[weather({'city': 'Paris'})]", "Clear, 21 °C."]
    tools = fake_model_thread.requests[0].body["tools"]
    [weather] = [t for t in tools if t["name"] == "weather"]
    assert weather["input_schema"]["required"] == ["city"]
    last = fake_model_thread.requests[1].body["messages"][-1]["content"]
    assert '"temperature":21' in str(last[0]["content"])


def test_hook_server(server_process: ServerProcess, fake_model_thread: FakeAnthropicThread) -> None:
    command = [sys.executable, str(EXAMPLES / "hook_server.py"), server_process.address]
    drive_hook_host(command, REPO, server_process, fake_model_thread, "no-shell")
