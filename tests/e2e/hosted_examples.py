"""What the Go and TypeScript clients' tests share: both examples/hosted programs do one scenario (the model
calls the hosted `lookup` and `write`; the program answers the call and approves the write), and both clients'
live reattach tests cut the connection inside a hosted handler. The scripts of the fake model and the checks of
what reached it are here, once; the languages differ only in how their program is built and run."""

from __future__ import annotations

import json
import subprocess

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from tests.e2e.conftest import describe_run
from tests.support.subprocess_server import ServerProcess

PROMPT = "look up and write"


def script_lookup_and_write(fake: FakeAnthropicThread, word: str) -> None:
    """The model calls `lookup` (hosted) and `write` (needs approval) at once, then answers "all done"."""
    lookup = ToolUseBlock(id="toolu_l", name="lookup", input={"q": word})
    write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": f"{word} notes"})
    fake.enqueue(Reply(blocks=[lookup, write], stop_reason="tool_use"), TextReply("all done"))


def check_hosted_example(
    result: subprocess.CompletedProcess[str], server: ServerProcess, fake: FakeAnthropicThread, word: str
) -> None:
    """The example's lines, the approved file, and the hosted answer the model got."""
    details = describe_run(result, server)
    assert result.returncode == 0, details
    lines = result.stdout.splitlines()
    assert lines[0].startswith("session "), details
    session_id = lines[0].removeprefix("session ")
    content = f"{word} notes"
    approval = f'approval: Approve write? {{"path":"notes.txt","content":"{content}"}}'
    assert sorted(lines[1:3]) == sorted([f"hosted: lookup {word}", approval]), details
    assert sorted(lines[3:5]) == ["tool_result: lookup", "tool_result: write"], details
    expected_end = ["text: all done", "outcome: RUN_OUTCOME_COMPLETED", "error: NotFound SESSION_NOT_FOUND"]
    assert lines[5:] == expected_end, details
    [written] = list(server.state_dir.rglob(f"{session_id}/notes.txt"))
    assert written.read_text() == content
    requests = fake.wait_for_requests(2, timeout=5.0)
    results = {block["tool_use_id"]: block for block in requests[1].messages[-1]["content"]}
    assert not any(block.get("is_error") for block in results.values()), results
    output = results["toolu_l"]["content"]
    text = output if isinstance(output, str) else output[0]["text"]
    assert json.loads(text) == {"word": word, "meaning": "a programming language"}


def script_cut_run(fake: FakeAnthropicThread, word: str) -> None:
    """The model calls the hosted `lookup` (whose handler cuts the connection), then answers "done"."""
    lookup = ToolUseBlock(id="toolu_l", name="lookup", input={"q": word})
    fake.enqueue(Reply(blocks=[lookup], stop_reason="tool_use"), TextReply("done"))


def script_slow_reply(fake: FakeAnthropicThread) -> None:
    """A turn's reply streamed slowly (0.1 s between events), so a test can cut the connection at its first
    delta while the rest is still to come."""
    words = ["one", "two", "three", "four", "five", "six"]
    chunks = [f"{word} " for word in words[:-1]] + [words[-1]]
    fake.enqueue(TextReply("".join(chunks), chunks=chunks, delay_between_events=0.1))


def check_answered_once(fake: FakeAnthropicThread) -> None:
    """The model got one result for its one call: the answer resent after the reattach was applied once."""
    requests = fake.wait_for_requests(2, timeout=5.0)
    [answer] = requests[1].messages[-1]["content"]
    assert answer["tool_use_id"] == "toolu_l"
    assert not answer.get("is_error"), answer
