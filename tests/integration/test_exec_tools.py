"""`exec` through real turns: a CODING session runs a command (tool_result, the model sees the output), a
timeout is a tool_error, server secrets do not reach commands, the workspace stays usable by the user commands
run as, and GENERAL sessions are not offered exec."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of
from tests.support.rpc import Stub, create_session, read_until, stream_turn, text_input


@pytest.fixture
async def stub(server_factory: ServerFactory, tmp_path: Path) -> AsyncIterator[Stub]:
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces")})
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel)


async def new_session(stub: Stub, mode: session_pb2.SessionMode.ValueType) -> str:
    session = await create_session(stub, identity=session_pb2.SessionIdentity(mode=mode))
    return session.identity.session_id


def exec_call(call_id: str, **arguments: Any) -> Reply:
    return Reply(blocks=[ToolUseBlock(id=call_id, name="exec", input=arguments)])


def tool_result_sent(fake_model: FakeAnthropic, request_index: int) -> dict[str, Any]:
    last = fake_model.requests[request_index].messages[-1]
    blocks = [b for b in last["content"] if b.get("type") == "tool_result"]
    assert len(blocks) == 1
    block: dict[str, Any] = blocks[0]
    return block


async def test_coding_session_runs_a_command(stub: Stub, fake_model: FakeAnthropic, tmp_path: Path) -> None:
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    fake_model.enqueue(exec_call("toolu_e1", command="echo hello > made.txt; cat made.txt; pwd"), TextReply("ran"))
    events = await stream_turn(stub, sid, "run it")
    assert kinds(events)[2:5] == ["tool_call", "tool_result", "turn_complete"]
    result = last_of(events, "tool_result")
    workspace = tmp_path / "workspaces" / "default" / sid
    assert (result.call_id, result.tool_name, result.is_error) == ("toolu_e1", "exec", False)
    assert result.output[0].text.text == f"hello\n{workspace}"
    assert dict(result.details.struct_value) == {"exit_code": 0.0, "truncated": False}
    assert (workspace / "made.txt").read_text() == "hello\n"
    block = tool_result_sent(fake_model, 1)
    assert block["content"] == f"hello\n{workspace}"
    assert "is_error" not in block
    exec_tool = next(t for t in fake_model.requests[0].tools if t["name"] == "exec")
    assert exec_tool["input_schema"]["required"] == ["command"]
    assert "process" in [t["name"] for t in fake_model.requests[0].tools]


async def test_non_zero_exit_is_a_tool_result(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    fake_model.enqueue(exec_call("toolu_e2", command="echo failing; exit 2"), TextReply("it failed"))
    events = await stream_turn(stub, sid, "run it")
    result = last_of(events, "tool_result")
    assert (result.is_error, result.output[0].text.text) == (False, "failing\n[Exit code: 2]")
    assert "is_error" not in tool_result_sent(fake_model, 1)


async def test_timeout_is_a_tool_error(stub: Stub, fake_model: FakeAnthropic) -> None:
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    fake_model.enqueue(exec_call("toolu_t", command="echo waiting; sleep 30", timeout=0.5), TextReply("too slow"))
    events = await stream_turn(stub, sid, "run it")
    assert kinds(events)[2:5] == ["tool_call", "tool_error", "turn_complete"]
    error = last_of(events, "tool_error")
    assert (error.call_id, error.tool_name) == ("toolu_t", "exec")
    assert error.error == "Command timed out after 0.5s\nwaiting"
    block = tool_result_sent(fake_model, 1)
    assert (block["is_error"], block["content"]) == (True, "Command timed out after 0.5s\nwaiting")


async def test_server_secrets_do_not_reach_commands(
    stub: Stub, fake_model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-integration-leak-check")
    monkeypatch.setenv("GENERAL_AGENT_AUTH_TOKENS", "token-integration-leak-check")
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    fake_model.enqueue(exec_call("toolu_env", command="env"), TextReply("env shown"))
    events = await stream_turn(stub, sid, "show env")
    output = last_of(events, "tool_result").output[0].text.text
    assert "PATH=" in output
    assert "leak-check" not in output
    assert "leak-check" not in tool_result_sent(fake_model, 1)["content"]


async def test_the_workspace_stays_usable_by_the_command_user(
    stub: Stub, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    # The server runs as root here (as in CI), so commands run as nobody (tools/shell/command_user.py): files the
    # file tools write, before the first command and after it, must stay theirs to change.
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    workspace = tmp_path / "workspaces" / "default" / sid

    def write(call_id: str, path: str, content: str) -> Reply:
        return Reply(blocks=[ToolUseBlock(id=call_id, name="write", input={"path": path, "content": content})])

    fake_model.enqueue(
        write("toolu_w1", "src/a.txt", "a\n"),
        exec_call("toolu_e1", command="echo more >> src/a.txt && mkdir build && echo b > build/b.txt && id -u"),
        write("toolu_w2", "src/new/c.txt", "c\n"),
        exec_call("toolu_e2", command='echo more >> src/new/c.txt && rm build/b.txt && echo "$HOME"'),
        TextReply("done"),
    )
    events = await stream_turn(stub, sid, "work on files")
    outputs = [e.tool_result.output[0].text.text for e in events if e.WhichOneof("event") == "tool_result"]
    assert outputs[1::2] == ["65534", str(workspace)]
    assert (workspace / "src" / "a.txt").read_text() == "a\nmore\n"
    assert (workspace / "src" / "new" / "c.txt").read_text() == "c\nmore\n"
    assert not (workspace / "build" / "b.txt").exists()
    for path in (
        workspace,
        workspace / "src" / "a.txt",
        workspace / "src" / "new",
        workspace / "src" / "new" / "c.txt",
    ):
        assert path.stat().st_uid == 65534, path


async def test_general_session_is_not_offered_exec(stub: Stub, fake_model: FakeAnthropic, tmp_path: Path) -> None:
    sid = await new_session(stub, session_pb2.SESSION_MODE_GENERAL)
    fake_model.enqueue(exec_call("toolu_g", command="touch should-not-exist"), TextReply("refused"))
    events = await stream_turn(stub, sid, "run it")
    offered = [t["name"] for t in fake_model.requests[0].tools]
    assert "exec" not in offered
    assert "process" not in offered
    # A model that calls it anyway gets an error, and nothing runs.
    assert last_of(events, "tool_error").error == "Tool exec not found"
    assert not (tmp_path / "workspaces" / "default" / sid / "should-not-exist").exists()


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def wait_for(condition: Any, what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting until {what}")


async def test_stop_during_a_long_command_kills_its_process_group(
    stub: Stub, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    workspace = tmp_path / "workspaces" / "default" / sid
    # The command forks a grandchild that records its pid, then both sleep.
    command = "(sleep 300 & echo $! > grandchild.pid; wait) & sleep 300"
    fake_model.enqueue(exec_call("toolu_long", command=command))
    turn = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("run forever")))
    seen = await read_until(turn, "tool_call")
    pid_file = workspace / "grandchild.pid"
    await wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), "the grandchild started")
    grandchild = int(pid_file.read_text())
    assert pid_alive(grandchild)
    stop = await stub.RequestStop(turn_api.RequestStopRequest(session_id=sid))
    assert stop.run_id
    events = seen + [r.event async for r in turn]
    assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_STOPPED
    assert last_of(events, "tool_error").call_id == "toolu_long"
    await wait_for(lambda: not pid_alive(grandchild), "the grandchild was killed")


async def test_background_processes_die_with_a_cancelled_run_and_a_deleted_session(
    stub: Stub, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
    workspace = tmp_path / "workspaces" / "default" / sid
    # A background process started by a run that completes keeps running...
    fake_model.enqueue(
        exec_call("toolu_bg1", command="echo $$ > kept.pid; exec sleep 300", background=True), TextReply("started")
    )
    await stream_turn(stub, sid, "start a server")
    kept_file = workspace / "kept.pid"
    await wait_for(lambda: kept_file.exists() and kept_file.read_text().strip(), "the kept process started")
    kept = int(kept_file.read_text())
    # ...one started by a run that is then cancelled dies with it.
    fake_model.enqueue(
        exec_call("toolu_bg2", command="echo $$ > doomed.pid; exec sleep 300", background=True),
        HangReply(after_events=2, reply=TextReply("never")),
    )
    turn = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=sid, input=text_input("start another")))
    run_id = (await read_until(turn, "tool_result"))[0].run_id
    doomed_file = workspace / "doomed.pid"
    await wait_for(lambda: doomed_file.exists() and doomed_file.read_text().strip(), "the doomed process started")
    doomed = int(doomed_file.read_text())
    await fake_model.wait_for_requests(4)
    await stub.CancelRun(turn_api.CancelRunRequest(session_id=sid, run_id=run_id))
    [r async for r in turn]
    await wait_for(lambda: not pid_alive(doomed), "the cancelled run's process was killed")
    assert pid_alive(kept)
    await stub.DeleteSession(session_api.DeleteSessionRequest(session_id=sid))
    await wait_for(lambda: not pid_alive(kept), "the deleted session's process was killed")


async def test_background_processes_die_at_server_shutdown(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws")})
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        sid = await new_session(stub, session_pb2.SESSION_MODE_CODING)
        fake_model.enqueue(
            exec_call("toolu_bg", command="echo $$ > bg.pid; exec sleep 300", background=True), TextReply("ok")
        )
        await stream_turn(stub, sid, "start it")
    pid_file = tmp_path / "ws" / "default" / sid / "bg.pid"
    await wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), "the process started")
    pid = int(pid_file.read_text())
    assert pid_alive(pid)
    await server.stop(grace=1.0)
    assert not pid_alive(pid)
