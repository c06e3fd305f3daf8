"""What the Go and TypeScript hosted examples (clients/go/examples/hosted, clients/ts/examples/hosted.ts) are
checked for: given a model that asks for `lookup` (a hosted tool) and `write` (which needs approval), the
example answers both, prints each event it saw, the run completes, and its error helper decodes the
NOT_FOUND of a deleted session's reason."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from tests.e2e.conftest import describe_run
from tests.support.subprocess_server import ServerProcess


def check_hosted_example(
    command: list[str],
    *,
    cwd: Path | None = None,
    server: ServerProcess,
    fake_model: FakeAnthropicThread,
    word: str,
    notes: str,
) -> None:
    """Runs the example `command` (its arguments name the server and the prompt) against a model asking to look up
    `word` and write `notes`, and checks its output, the written file and the lookup result the model received."""
    lookup = ToolUseBlock(id="toolu_l", name="lookup", input={"q": word})
    write = ToolUseBlock(id="toolu_w", name="write", input={"path": "notes.txt", "content": notes})
    fake_model.enqueue(Reply(blocks=[lookup, write], stop_reason="tool_use"), TextReply("all done"))
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=90, check=False)

    details = describe_run(result, server)
    assert result.returncode == 0, details
    lines = result.stdout.splitlines()
    assert lines[0].startswith("session "), details
    session_id = lines[0].removeprefix("session ")
    approval = "approval: Approve write? " + json.dumps({"path": "notes.txt", "content": notes}, separators=(",", ":"))
    assert sorted(lines[1:3]) == sorted([f"hosted: lookup {word}", approval]), details
    assert sorted(lines[3:5]) == ["tool_result: lookup", "tool_result: write"], details
    expected_end = ["text: all done", "outcome: RUN_OUTCOME_COMPLETED", "error: NotFound SESSION_NOT_FOUND"]
    assert lines[5:] == expected_end, details
    [written] = list(server.state_dir.rglob(f"{session_id}/notes.txt"))
    assert written.read_text() == notes
    requests = fake_model.wait_for_requests(2, timeout=5.0)
    results = {block["tool_use_id"]: block for block in requests[1].messages[-1]["content"]}
    assert not any(block.get("is_error") for block in results.values()), results
    output = results["toolu_l"]["content"]
    text = output if isinstance(output, str) else output[0]["text"]
    assert json.loads(text) == {"word": word, "meaning": "a programming language"}
