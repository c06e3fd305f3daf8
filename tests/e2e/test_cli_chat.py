"""`general-agent chat` in a pseudo-terminal against a live server: a hosted call answered by typed input, an
approval answered "always", the usage line, and Ctrl-C (the first cancels the run, the second exits)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from general_agent.sync import AgentClient
from general_agent.testing import FakeAnthropicThread, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import hosted_tool_pb2, session_pb2
from tests.e2e.snippets import client_env
from tests.support.pty_session import PtySession
from tests.support.subprocess_server import ServerProcess


@pytest.fixture
def chat(server_process: ServerProcess) -> Iterator[list[PtySession]]:
    sessions: list[PtySession] = []
    yield sessions
    for session in sessions:
        session.close()


def start_chat(sessions: list[PtySession], address: str, *args: str) -> PtySession:
    command = [sys.executable, "-m", "general_agent_server", "chat", "--address", address, *args]
    session = PtySession(command, client_env())
    sessions.append(session)
    return session


def test_a_chat_answers_a_hosted_call_and_an_approval_from_typed_input(
    chat: list[PtySession], server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    lookup = hosted_tool_pb2.HostedToolDefinition(name="lookup", description="Looks a word up.")
    with AgentClient(server_process.address) as client:
        session = client.create_session(mode="CODING", hosted_tools=[lookup], approval_policy=["write"])
    sid = session.identity.session_id
    fake_model_thread.enqueue(
        Reply(blocks=[ToolUseBlock(id="l1", name="lookup", input={"word": "kayak"})]),
        TextReply("A kayak is a small boat."),
        Reply(blocks=[ToolUseBlock(id="w1", name="write", input={"path": "kayak.txt", "content": "boat"})]),
        TextReply("Saved."),
    )

    term = start_chat(chat, server_process.address, "--session", sid)
    term.expect(rf"session {sid}")
    term.expect(r"you> ")
    term.send("what is a kayak?\n")
    term.expect(r"hosted tool lookup .*kayak")
    term.expect(r"result> ")
    term.send("a small boat\n")
    term.expect(r"A kayak is a small boat\.")
    term.expect(r"\d+ in · \d+ out · context \d+%")  # the run's usage
    term.expect(r"you> ")
    term.send("save it\n")
    term.expect(r"→ write")  # the call, then its approval
    term.expect(r"approval Approve write\? .*kayak\.txt")
    term.expect(r"\[y\]es / \[a\]lways / \[n\]o> ")
    term.send("a\n")
    term.expect(r"approve always")
    term.expect(r"← write")
    term.expect(r"Saved\.")
    term.expect(r"you> ")
    term.send("\x04")  # Ctrl-D: the end of input

    assert term.wait() == 0, term.text
    lookup_answer = fake_model_thread.requests[1].body["messages"][-1]["content"][0]
    assert lookup_answer["content"] == "a small boat"
    with AgentClient(server_process.address) as client:
        assert list(client.get_session(sid).approved_tools) == ["write"]


def test_ctrl_c_cancels_the_run_and_a_second_ctrl_c_exits_and_model_picks_the_model(
    chat: list[PtySession], server_process: ServerProcess, fake_model_thread: FakeAnthropicThread
) -> None:
    hang = HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))
    fake_model_thread.enqueue(hang)

    term = start_chat(chat, server_process.address, "--model", "anthropic/claude-haiku-4-5")
    sid = term.expect(r"session (\S+) · model anthropic/claude-haiku-4-5")[1]
    term.expect(r"you> ")
    term.send("a long task\n")
    term.expect(r"partial ")
    term.send("\x03")
    term.expect(r"cancelled")
    term.expect(r"you> ")
    with AgentClient(server_process.address) as client:
        session = client.get_session(sid)
        [finished] = [e for e in client.history(sid) if e.WhichOneof("entry") == "assistant"]
    hang.release()

    assert session.state == session_pb2.SESSION_STATE_IDLE  # the run was cancelled on the server
    assert finished.assistant.aborted
    assert fake_model_thread.requests[0].body["model"] == "claude-haiku-4-5"  # --model, its prefix stripped
    term.send("\x03")
    assert term.wait() == 130, term.text
