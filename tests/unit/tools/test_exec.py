"""`exec` in the foreground: output, exit codes, truncation, control characters, timeouts and cancellation
killing the whole process group, the filtered environment, the working directory, and the catalog wiring."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from general_agent_server.config import ServerSettings
from general_agent_server.tools.catalog import builtin_catalog
from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.tools.shell.commands import allowed_names, filtered_environment, shell_path
from general_agent_server.tools.shell.output_text import MAX_BYTES, ByteTail, sanitize, tail_lines
from tests.unit.tools.exec_support import context, make_tools, pid_alive, read_pid, text, wait_until

# Starts a grandchild (a sleep under a nested shell) that records its pid, then sleeps itself.
FORKS_GRANDCHILD = "bash -c 'sleep 300 & echo $! > grandchild.pid; wait' & echo started; sleep 300"


async def test_output_and_details(tmp_path: Path) -> None:
    tools = make_tools()
    outcome = await tools.exec.run({"command": "echo hello; echo oops >&2"}, context(tmp_path))
    assert text(outcome) == "hello\noops"
    assert not outcome.is_error
    assert json.loads(outcome.details_json) == {"exit_code": 0, "truncated": False}


async def test_empty_output(tmp_path: Path) -> None:
    outcome = await make_tools().exec.run({"command": "true"}, context(tmp_path))
    assert text(outcome) == "(no output)"


async def test_non_zero_exit_is_a_normal_result(tmp_path: Path) -> None:
    tools = make_tools()
    outcome = await tools.exec.run({"command": "echo partial; exit 3"}, context(tmp_path))
    assert (text(outcome), outcome.is_error) == ("partial\n[Exit code: 3]", False)
    assert json.loads(outcome.details_json)["exit_code"] == 3
    silent = await tools.exec.run({"command": "exit 7"}, context(tmp_path))
    assert text(silent) == "(no output)\n[Exit code: 7]"


async def test_control_characters_are_stripped(tmp_path: Path) -> None:
    command = r"printf '\033[31mred\033[0m\tcol\r\nbell\a\x01end\n'"
    outcome = await make_tools().exec.run({"command": command}, context(tmp_path))
    assert text(outcome) == "red\tcol\nbellend"


async def test_output_is_tail_truncated_by_lines(tmp_path: Path) -> None:
    outcome = await make_tools().exec.run({"command": "seq 1 5000"}, context(tmp_path))
    lines = text(outcome).split("\n")
    assert lines[0] == "3001"
    assert lines[-2:] == ["5000", "[Output truncated: showing last 2000 lines]"]
    assert json.loads(outcome.details_json) == {"exit_code": 0, "truncated": True}


async def test_output_is_tail_truncated_by_bytes(tmp_path: Path) -> None:
    # 100 lines of 1000 characters: 51 of them fit in 50 KB.
    command = 'for i in $(seq 1 100); do printf "%04d%0996d\\n" $i 0; done'
    outcome = await make_tools().exec.run({"command": command}, context(tmp_path))
    body, notice = text(outcome).rsplit("\n", 1)
    assert notice == "[Output truncated: showing last 51 lines]"
    shown = body.split("\n")
    assert [line[:4] for line in (shown[0], shown[-1])] == ["0050", "0100"]
    assert len(body.encode()) <= MAX_BYTES


async def test_huge_output_keeps_its_tail_and_bounded_memory(tmp_path: Path) -> None:
    outcome = await make_tools().exec.run({"command": "seq 1 2000000; echo last"}, context(tmp_path))
    lines = text(outcome).split("\n")
    assert lines[-3:] == ["2000000", "last", "[Output truncated: showing last 2000 lines]"]
    tail = ByteTail(1000)
    for _ in range(10_000):
        tail.append(b"x" * 999 + b"\n")
    assert tail.held_bytes <= 2000
    assert tail.truncated


async def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    tools = make_tools()
    with pytest.raises(ToolFailure) as failure:
        await tools.exec.run({"command": FORKS_GRANDCHILD, "timeout": 1}, context(tmp_path))
    assert failure.value.message == "Command timed out after 1s\nstarted"
    assert failure.value.details == {"timed_out": True, "timeout_seconds": 1.0, "truncated": False}
    grandchild = await read_pid(tmp_path / "grandchild.pid")
    await wait_until(lambda: not pid_alive(grandchild))


async def test_default_and_maximum_timeouts(tmp_path: Path) -> None:
    tools = make_tools(default_timeout=0.3, max_timeout=0.5)
    with pytest.raises(ToolFailure, match=r"^Command timed out after 0\.3s$"):
        await tools.exec.run({"command": "sleep 30"}, context(tmp_path))
    with pytest.raises(ToolFailure, match=r"^Command timed out after 0\.5s$"):
        await tools.exec.run({"command": "sleep 30", "timeout": 100}, context(tmp_path))


async def test_leftover_background_children_are_killed_when_the_command_exits(tmp_path: Path) -> None:
    # The leftover sleep holds the output pipe: without the group kill this call would wait for it.
    command = "sleep 300 & echo $! > leftover.pid; echo done"
    outcome = await make_tools(default_timeout=20).exec.run({"command": command}, context(tmp_path))
    assert text(outcome) == "done"
    leftover = int((tmp_path / "leftover.pid").read_text())
    await wait_until(lambda: not pid_alive(leftover))


async def test_cancellation_kills_the_process_group(tmp_path: Path) -> None:
    tools = make_tools()
    command = f"echo $$ > shell.pid; {FORKS_GRANDCHILD}"
    task = asyncio.create_task(tools.exec.run({"command": command}, context(tmp_path)))
    shell = await read_pid(tmp_path / "shell.pid")
    grandchild = await read_pid(tmp_path / "grandchild.pid")
    assert pid_alive(shell)
    assert pid_alive(grandchild)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The shell is our child: by the time run() re-raised it was reaped, not left a zombie.
    assert not Path(f"/proc/{shell}").exists()
    await wait_until(lambda: not pid_alive(grandchild))


async def test_secrets_in_the_server_environment_do_not_reach_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-leak-check-1234")
    monkeypatch.setenv("BRAVE_API_KEY", "brave-leak-check-5678")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "token-leak-check-9012")
    outcome = await make_tools().exec.run({"command": "env"}, context(tmp_path))
    output = text(outcome)
    assert re.search(r"^PATH=", output, re.MULTILINE)
    for leaked in ("sk-ant-leak-check", "brave-leak-check", "token-leak-check", "ANTHROPIC_API_KEY"):
        assert leaked not in output


async def test_allowed_names_keep_their_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("Mixed_Case_Var", "kept")
    monkeypatch.setenv("MIXED_CASE_VAR", "not allowed")
    tools = make_tools(env_allow="PATH, Mixed_Case_Var ,,PATH")
    outcome = await tools.exec.run({"command": "env"}, context(tmp_path))
    assert "Mixed_Case_Var=kept" in text(outcome)
    assert "not allowed" not in text(outcome)
    assert allowed_names("PATH, Mixed_Case_Var ,,PATH") == ("PATH", "Mixed_Case_Var")
    assert filtered_environment(("A", "B"), {"A": "1", "C": "3"}) == {"A": "1"}


def test_shell_choice() -> None:
    assert shell_path({"SHELL": "/bin/sh"}) == "/bin/sh"
    assert shell_path({"SHELL": "/nonexistent/shell"}) == "/bin/bash"
    assert shell_path({}) == "/bin/bash"


async def test_workdir(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    tools = make_tools()
    # The workspace is created when missing.
    assert text(await tools.exec.run({"command": "pwd"}, context(workspace))) == str(workspace)
    (workspace / "sub" / "dir").mkdir(parents=True)
    outcome = await tools.exec.run({"command": "pwd", "workdir": "sub/dir"}, context(workspace))
    assert text(outcome) == str(workspace / "sub" / "dir")
    with pytest.raises(ToolFailure, match=r"^Working directory does not exist: nope$"):
        await tools.exec.run({"command": "pwd", "workdir": "nope"}, context(workspace))
    with pytest.raises(ToolFailure, match="outside the workspace"):
        await tools.exec.run({"command": "pwd", "workdir": ".."}, context(workspace))
    with pytest.raises(ToolFailure, match=r"^command must not be empty$"):
        await tools.exec.run({"command": "  "}, context(workspace))


def test_sanitize_and_tail_helpers() -> None:
    assert sanitize("a\x1b]0;title\x07b\x1b[2Kc\x1b(Bd\x7f\x9b") == "abcd"
    assert tail_lines("a\nb\nc", max_lines=2).text == "b\nc"
    assert tail_lines("a\nb\nc", max_lines=5).truncated is False
    huge = tail_lines("x" * 100 + "yz", max_bytes=10)
    assert (huge.text, huge.lines, huge.truncated) == ("xxxxxxxxyz", 1, True)


def test_spec_and_catalog_wiring() -> None:
    settings = ServerSettings(exec_timeout=5, exec_timeout_max=100)
    catalog = builtin_catalog(settings)
    assert {"exec", "process"} <= set(catalog.builtins)
    spec = catalog.builtins["exec"].spec
    assert (spec.read_only, spec.timeout_seconds) == (False, 130.0)
    assert catalog.builtins["process"].spec.read_only is False
    general = catalog.for_session(coding=False, allowed=[])
    assert "exec" not in general.names()
    assert "process" not in general.names()
    assert {"exec", "process"} <= set(catalog.for_session(coding=True, allowed=[]).names())
    disabled = builtin_catalog(ServerSettings(exec_enabled=False))
    assert not {"exec", "process"} & set(disabled.builtins)


async def test_catalog_exec_and_process_share_one_registry(tmp_path: Path) -> None:
    catalog = builtin_catalog(ServerSettings())
    ctx = context(tmp_path)
    try:
        started = await catalog.builtins["exec"].run({"command": "sleep 300", "background": True}, ctx)
        process_id = text(started).split("\n")[0].rsplit(" ", 1)[1]
        listed = await catalog.builtins["process"].run({"action": "list"}, ctx)
        assert [entry["id"] for entry in json.loads(text(listed))] == [process_id]
    finally:
        await catalog.aclose()
    assert text(await catalog.builtins["process"].run({"action": "list"}, ctx)) == "No active sessions."
