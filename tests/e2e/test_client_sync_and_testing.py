"""general_agent.testing.server (the real server on a free port with the scripted model, and its pytest fixture)
driven through the blocking facade general_agent.sync: plain-function hosted tools and on_approval, iterators for
the streaming and paged methods, typed errors, and a server that is gone once the block ends."""

from __future__ import annotations

import pytest

from general_agent import ApprovalAnswer, ApprovalRequested, AssistantDelta, SessionNotFound
from general_agent.sync import AgentClient
from general_agent.testing import Reply, TextReply, ToolUseBlock
from general_agent.testing.pytest_plugin import agent_server as agent_server  # the fixture, as a host would use it
from general_agent.testing.server import LocalServer
from general_agent.testing.server import agent_server as start_agent_server


def test_the_sync_client_against_the_testing_server() -> None:
    with start_agent_server() as server:
        server.model.enqueue(
            Reply(blocks=[ToolUseBlock(id="c1", name="add", input={"a": 2, "b": 40})]),
            TextReply("It is 42."),
        )
        with AgentClient(server.address) as client:

            @client.hosted_tool("add")
            def add(a: int, b: int) -> str:  # a plain function: it runs in a worker thread
                return str(a + b)

            sid = client.create_session(labels={"via": "sync"}).identity.session_id
            result = client.run(sid, "2 + 40?")
            listed = [s.identity.session_id for s in client.list_sessions(labels={"via": "sync"})]
            server.model.enqueue(TextReply("streamed"))
            kinds = [e.WhichOneof("event") for e in client.stream_turn(sid, "again")]
            with pytest.raises(SessionNotFound):
                client.get_session("no-such-session")
        process = server.process

    assert result.ok
    assert result.text == "It is 42."
    last = server.model.requests[1].body["messages"][-1]["content"]
    assert [b["content"] for b in last if b.get("type") == "tool_result"] == ["42"]
    assert listed == [sid]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_finished"
    assert process.poll() is not None  # the server is gone with the block


def test_the_fixture_serves_a_plain_on_approval(agent_server: LocalServer) -> None:
    asked: list[str] = []

    def on_approval(request: ApprovalRequested) -> ApprovalAnswer:
        asked.append(request.title)
        return ApprovalAnswer.approve({"path": "notes.txt", "content": "edited"})

    agent_server.model.enqueue(
        Reply(blocks=[ToolUseBlock(id="w", name="write", input={"path": "notes.txt", "content": "draft"})]),
        TextReply("saved", chunks=["sa", "ved"]),
    )
    with AgentClient(agent_server.address) as client:
        sid = client.create_session(mode="CODING", approval_policy=["write"]).identity.session_id
        deltas = [e.text for e in client.run_events(sid, "save notes", on_approval=on_approval)
                  if isinstance(e, AssistantDelta)]  # fmt: skip
        checkpoints = list(client.list_checkpoints(sid))

    assert asked == ["Approve write?"]
    assert "".join(deltas) == "saved"
    assert [c.paths for c in checkpoints] == [["notes.txt"]]
    assert (agent_server.state_dir / "server.log").exists()
