"""A store write that fails mid-run: the run ends FAILED/INTERNAL with its tool round closed, nothing is
left half-done in memory, and the next turn works with a valid history. The failing write is the tool
round's results commit, which lands while the next model request is already out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2
from general_agent_server.store.port import StoreError, WriteBatch
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.rpc import connect, create_session, stream_turn


async def test_a_failed_results_commit_fails_the_run_and_the_next_turn_works(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    server = await server_factory({"GENERAL_AGENT_WORKSPACE_DIR": str(root)})
    store = server.store
    real_write = store.write
    failed: list[WriteBatch] = []

    async def write(batch: WriteBatch, *, durable: bool = True) -> None:
        results = [m for m in batch.history if any(b.get("type") == "tool_result" for b in m.content)]
        if results and not failed:
            failed.append(batch)
            raise StoreError("disk full")
        await real_write(batch, durable=durable)

    monkeypatch.setattr(store, "write", write)
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        (root / "default" / sid).mkdir(parents=True)
        (root / "default" / sid / "a.txt").write_text("alpha\n")
        fake_model.enqueue(
            Reply(blocks=[ToolUseBlock(id="t1", name="read", input={"path": "a.txt"})]), TextReply("never shown")
        )
        events = await stream_turn(stub, sid, "read it")
        finished = last_of(events, "run_finished")
        assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_INTERNAL)
        assert failed, "the results commit was attempted"
        assert "assistant_delta" not in [e.WhichOneof("event") for e in events]

        fake_model.enqueue(TextReply("fine now"))
        second = await stream_turn(stub, sid, "again")
        assert last_of(second, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        messages: list[dict[str, Any]] = fake_model.requests[-1].messages
        # Every tool_use has its result right after it: the round was closed, not left dangling.
        uses = [b["id"] for m in messages for b in m["content"] if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for m in messages for b in m["content"] if b.get("type") == "tool_result"]
        assert uses == results == ["t1"]
