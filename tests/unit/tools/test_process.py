"""Background `exec` and the `process` tool: poll, log, write, kill, list, remove; per-session isolation; the
lifecycle calls (run cancelled, session closed, shutdown) killing what they should; bounded output buffers."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolLifecycle
from general_agent_server.tools.shell.background import Owner, ProcessRegistry
from general_agent_server.tools.shell.background_output import PENDING_CAP_CHARS, PENDING_TAIL_CHARS, ProcessOutput
from general_agent_server.tools.shell.commands import ShellLauncher
from tests.unit.tools.exec_support import Tools, context, make_tools, pid_alive, read_pid, text, wait_until

STARTED = re.compile(
    r"^Background session started: (?P<id>[0-9a-f]{12})\nCommand: (?P<command>.*)\nPID: (?P<pid>\d+)\n"
    r"Use the process tool to check status\.$",
    re.DOTALL,
)


@pytest.fixture
async def tools() -> AsyncIterator[Tools]:
    value = make_tools()
    yield value
    await value.exec.aclose()


async def start(tools: Tools, command: str, ctx: ToolContext) -> tuple[str, int]:
    outcome = await tools.exec.run({"command": command, "background": True}, ctx)
    match = STARTED.match(text(outcome))
    assert match, text(outcome)
    assert match["command"] == command
    return match["id"], int(match["pid"])


async def process(tools: Tools, ctx: ToolContext, action: str, **arguments: Any) -> str:
    return text(await tools.process.run({"action": action, **arguments}, ctx))


async def exited(tools: Tools, ctx: ToolContext, process_id: str) -> None:
    entry = tools.registry.get(ctx.tenant, ctx.session_id, process_id)
    await wait_until(lambda: not entry.running)


async def test_background_start_and_poll(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    process_id, pid = await start(tools, "echo one; read line; echo got $line", ctx)
    assert pid_alive(pid)
    await wait_until(lambda: tools.registry.get("default", "s1", process_id).output.lines() == ["one"])
    assert await process(tools, ctx, "poll", sessionId=process_id) == "[running]\none\n"
    assert await process(tools, ctx, "poll", sessionId=process_id) == "[running]\n(no new output)"
    assert await process(tools, ctx, "write", sessionId=process_id, data="two\n") == "Data written to stdin."
    await exited(tools, ctx, process_id)
    assert await process(tools, ctx, "poll", sessionId=process_id) == "[exited: 0]\ngot two\n"
    assert not pid_alive(pid)


async def test_exit_code_of_a_background_command(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    process_id, _ = await start(tools, "exit 4", ctx)
    await exited(tools, ctx, process_id)
    assert await process(tools, ctx, "poll", sessionId=process_id) == "[exited: 4]\n(no new output)"


async def test_log_offset_and_limit(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    process_id, _ = await start(tools, "seq 1 10", ctx)
    await exited(tools, ctx, process_id)
    assert await process(tools, ctx, "log", sessionId=process_id, offset=2, limit=3) == "[Lines 3-5 of 10]\n3\n4\n5"
    full = await process(tools, ctx, "log", sessionId=process_id)
    assert full == "[Lines 1-10 of 10]\n" + "\n".join(str(i) for i in range(1, 11))
    with pytest.raises(ToolFailure, match=r"^offset 10 is beyond the end of the log \(10 lines\)$"):
        await process(tools, ctx, "log", sessionId=process_id, offset=10)
    silent_id, _ = await start(tools, "true", ctx)
    await exited(tools, ctx, silent_id)
    assert await process(tools, ctx, "log", sessionId=silent_id) == "(no output)"


async def test_write_errors(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    process_id, _ = await start(tools, "cat", ctx)
    with pytest.raises(ToolFailure, match=r"^data is required for action write$"):
        await process(tools, ctx, "write", sessionId=process_id)
    await process(tools, ctx, "kill", sessionId=process_id)
    with pytest.raises(ToolFailure, match=rf"^Session {process_id} has already exited"):
        await process(tools, ctx, "write", sessionId=process_id, data="late\n")


async def test_kill_takes_the_whole_tree(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    command = "bash -c 'sleep 300 & echo $! > grandchild.pid; wait' & sleep 300"
    process_id, pid = await start(tools, command, ctx)
    grandchild = await read_pid(tmp_path / "grandchild.pid")
    killed = await process(tools, ctx, "kill", sessionId=process_id)
    assert killed == f"Sent SIGKILL to process tree (PID: {pid})"
    assert (await process(tools, ctx, "poll", sessionId=process_id)).startswith("[exited: -9]")
    await wait_until(lambda: not pid_alive(grandchild))
    assert not Path(f"/proc/{pid}").exists()
    assert await process(tools, ctx, "kill", sessionId=process_id) == "Session already exited."


async def test_list_and_remove(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    assert await process(tools, ctx, "list") == "No active sessions."
    long_command = "sleep 300 # " + "x" * 100
    running_id, running_pid = await start(tools, long_command, ctx)
    done_id, _ = await start(tools, "exit 2", ctx)
    await exited(tools, ctx, done_id)
    listed = json.loads(await process(tools, ctx, "list"))
    assert [(e["id"], e["running"], e["exitCode"]) for e in listed] == [(running_id, True, None), (done_id, False, 2)]
    assert listed[0]["command"] == long_command[:80]
    assert listed[0]["pid"] == running_pid
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", listed[0]["startedAt"])
    assert await process(tools, ctx, "remove", sessionId=running_id) == f"Session {running_id} removed."
    assert not Path(f"/proc/{running_pid}").exists()
    assert [e["id"] for e in json.loads(await process(tools, ctx, "list"))] == [done_id]
    with pytest.raises(ToolFailure, match=rf"^No session found for {running_id}$"):
        await process(tools, ctx, "poll", sessionId=running_id)


async def test_missing_or_unknown_session_id(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    for action in ("poll", "log", "write", "kill", "remove"):
        with pytest.raises(ToolFailure, match=rf"^sessionId is required for action {action}$"):
            await process(tools, ctx, action)
    with pytest.raises(ToolFailure, match=r"^No session found for 0123456789ab$"):
        await process(tools, ctx, "poll", sessionId="0123456789ab")


async def test_sessions_see_only_their_own_processes(tools: Tools, tmp_path: Path) -> None:
    mine = context(tmp_path / "a", session="a")
    process_id, pid = await start(tools, "sleep 300", mine)
    for other in (context(tmp_path / "b", session="b"), context(tmp_path / "a", session="a", tenant="other")):
        assert await process(tools, other, "list") == "No active sessions."
        for action in ("poll", "log", "kill", "remove"):
            with pytest.raises(ToolFailure, match=rf"^No session found for {process_id}$"):
                await process(tools, other, action, sessionId=process_id)
    assert pid_alive(pid)
    assert await process(tools, mine, "poll", sessionId=process_id) == "[running]\n(no new output)"


async def test_run_cancelled_kills_only_that_runs_processes(tools: Tools, tmp_path: Path) -> None:
    assert isinstance(tools.exec, ToolLifecycle)
    first_run = context(tmp_path, run="run-1")
    second_run = context(tmp_path, run="run-2")
    cancelled_id, cancelled_pid = await start(tools, "sleep 300", first_run)
    kept_id, kept_pid = await start(tools, "sleep 300", second_run)
    await tools.exec.run_cancelled("default", "s1", "run-1")
    assert not Path(f"/proc/{cancelled_pid}").exists()
    assert pid_alive(kept_pid)
    # The killed process stays listed, so the session can still read what it printed.
    states = {e["id"]: e["running"] for e in json.loads(await process(tools, second_run, "list"))}
    assert states == {cancelled_id: False, kept_id: True}


async def test_session_closed_kills_and_forgets_that_sessions_processes(tools: Tools, tmp_path: Path) -> None:
    closing = context(tmp_path / "a", session="a")
    staying = context(tmp_path / "b", session="b")
    _, closing_pid = await start(tools, "sleep 300", closing)
    _, staying_pid = await start(tools, "sleep 300", staying)
    await tools.exec.session_closed("default", "a")
    assert not Path(f"/proc/{closing_pid}").exists()
    assert await process(tools, closing, "list") == "No active sessions."
    assert pid_alive(staying_pid)


async def test_aclose_kills_everything(tmp_path: Path) -> None:
    tools = make_tools()
    pids = [(await start(tools, "sleep 300", context(tmp_path / s, session=s)))[1] for s in ("a", "b", "c")]
    await tools.exec.aclose()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert tools.registry.list("default", "a") == []


async def test_processes_per_session_are_capped(tmp_path: Path) -> None:
    registry = ProcessRegistry(ShellLauncher("PATH"), max_per_session=2)
    owner = Owner(tenant="default", session_id="s1", run_id="r")
    try:
        await registry.start("sleep 300", tmp_path, owner)
        await registry.start("sleep 300", tmp_path, owner)
        with pytest.raises(ToolFailure, match="already has 2 background processes"):
            await registry.start("sleep 300", tmp_path, owner)
        # Another session has its own allowance.
        await registry.start("sleep 300", tmp_path, Owner(tenant="default", session_id="s2", run_id="r"))
    finally:
        await registry.aclose()


def test_pending_output_is_bounded() -> None:
    output = ProcessOutput()
    output.feed(b"a" * PENDING_CAP_CHARS + b"b" * 10)
    pending, dropped = output.take_pending()
    assert len(pending) == PENDING_TAIL_CHARS
    assert pending.endswith("b" * 10)
    assert dropped == PENDING_CAP_CHARS + 10 - PENDING_TAIL_CHARS
    assert output.take_pending() == ("", 0)


def test_log_is_bounded_with_a_count_of_dropped_lines() -> None:
    output = ProcessOutput(log_cap_chars=100)
    output.feed(b"".join(b"line%05d\n" % i for i in range(100)))
    lines = output.lines()
    assert lines[-1] == "line00099"
    assert sum(len(line) + 1 for line in lines) <= 100
    assert output.dropped_lines == 100 - len(lines)
    # A line that never ends is bounded too.
    output.feed(b"z" * 1000)
    assert output.lines()[-1] == "z" * 100


def test_output_decoding_across_chunks_and_control_characters() -> None:
    output = ProcessOutput()
    encoded = "é\x1b[1mbold\x1b[0m\n".encode()
    output.feed(encoded[:1])
    output.feed(encoded[1:])
    assert output.lines() == ["ébold"]


async def test_poll_reports_dropped_output(tools: Tools, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    process_id, _ = await start(tools, f"head -c {PENDING_CAP_CHARS + 5} /dev/zero | tr '\\0' x; echo", ctx)
    await exited(tools, ctx, process_id)
    polled = await process(tools, ctx, "poll", sessionId=process_id)
    status, note, body = polled.split("\n", 2)
    assert status == "[exited: 0]"
    match = re.fullmatch(r"\[(\d+) earlier characters were dropped\]", note)
    assert match
    # How much is dropped depends on how the output was chunked; together they account for all of it.
    assert int(match[1]) + len(body) == PENDING_CAP_CHARS + 6
    assert PENDING_TAIL_CHARS <= len(body) <= PENDING_CAP_CHARS
    assert body == "x" * (len(body) - 1) + "\n"
