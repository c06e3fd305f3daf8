"""Store failures. A store write that fails mid-run: the run ends FAILED/INTERNAL with its tool round closed,
nothing is left half-done in memory, and the next turn works with a valid history (the failing write is the
tool round's results commit, which lands while the next model request is already out). A full disk and a
database another process keeps locked past the busy timeout: writes are refused RESOURCE_EXHAUSTED and
UNAVAILABLE (`RESOURCE_LIMIT`, RetryInfo), nothing committed is lost, and the server recovers once the
condition clears."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, session_pb2
from general_agent_server.app import RunningServer
from general_agent_server.store.port import StoreError, WriteBatch
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.rpc import (
    Stub,
    connect,
    create_session,
    decode_status,
    get_session,
    read_until,
    rpc_error,
    stream_turn,
    turn_call,
    wait_idle,
)


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


def message_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for m in messages for b in m["content"] if b.get("type") == "text"]


async def session_with_a_turn(stub: Stub, fake_model: FakeAnthropic) -> str:
    sid = (await create_session(stub)).identity.session_id
    fake_model.enqueue(TextReply("first answer"))
    assert last_of(await stream_turn(stub, sid, "first"), "run_finished").outcome == 1
    return sid


async def on_writer(server: RunningServer, sql: str) -> Any:
    """Runs `sql` on the SQLite store's write connection, on its thread (the limit is that connection's)."""
    store: Any = server.store
    writer = store._writer
    return await writer._on_thread(lambda: writer._conn.execute(sql).fetchall())


async def test_a_full_disk_refuses_writes_with_retry_and_recovers(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory()
    async with connect(server.address) as stub:
        sid = await session_with_a_turn(stub, fake_model)
        # SQLite's page limit makes the file as full as a full disk would: every write needing a page fails.
        (pages,) = (await on_writer(server, "PRAGMA page_count"))[0]
        await on_writer(server, f"PRAGMA max_page_count={pages}")
        big = "x" * 200_000
        for refused in (rpc_error(turn_call(stub, sid, big)), rpc_error(create_session(stub, system_prompt=big))):
            error = await refused
            assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_LIMIT")
            assert error.metadata["resource"] == "store_disk"
            assert error.retry_delay is not None
            assert error.retry_delay > 0
        requests = len(fake_model.requests)
        assert (await get_session(stub, sid)).state == session_pb2.SESSION_STATE_IDLE

        await on_writer(server, "PRAGMA max_page_count=1073741823")  # space returns
        fake_model.enqueue(TextReply("second answer"))
        assert last_of(await stream_turn(stub, sid, big), "run_finished").outcome == 1
        assert len(fake_model.requests) == requests + 1  # the refused turn never reached the model
        assert message_texts(fake_model.requests[-1].messages) == ["first", "first answer", big]
        assert (await create_session(stub)).identity.session_id
    assert await on_writer(server, "PRAGMA integrity_check") == [("ok",)]


HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


async def test_a_database_locked_by_another_process_answers_unavailable_and_recovers(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory()
    async with connect(server.address) as stub:
        sid = await session_with_a_turn(stub, fake_model)
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOLD_LOCK, str(server.sqlite_path),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert holder.stdin is not None
        assert holder.stdout is not None
        try:
            assert await holder.stdout.readline() == b"locked\n"
            # Held past the store's busy timeout: the write gives up instead of waiting for ever.
            error = await rpc_error(turn_call(stub, sid, "second"))
            assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "RESOURCE_LIMIT")
            assert error.metadata["resource"] == "store_lock"
            assert error.retry_delay is not None
            # Reads still answer (WAL: readers never wait for the writer).
            assert (await get_session(stub, sid)).state == session_pb2.SESSION_STATE_IDLE
        finally:
            holder.stdin.write(b"release\n")
            await holder.stdin.drain()
            await holder.wait()
        fake_model.enqueue(TextReply("second answer"))
        assert last_of(await stream_turn(stub, sid, "second"), "run_finished").outcome == 1
        assert message_texts(fake_model.requests[-1].messages) == ["first", "first answer", "second"]


async def test_a_disk_that_fills_during_a_run_fails_the_run_and_the_session_recovers(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory()
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        sid = (await create_session(stub)).identity.session_id
        hang = HangReply(after_events=2, reply=TextReply("y" * 300_000))
        fake_model.enqueue(hang)
        running = turn_call(stub, sid, "a long one")
        await read_until(running, "run_started")
        (pages,) = (await on_writer(server, "PRAGMA page_count"))[0]
        await on_writer(server, f"PRAGMA max_page_count={pages}")
        hang.release()
        events = [response.event async for response in running]
        # The end did not fit: the stream says the run failed for the store, not that it completed.
        finished = last_of(events, "run_finished")
        assert (finished.outcome, finished.reason) == (event_pb2.RUN_OUTCOME_FAILED, event_pb2.RUN_REASON_INTERNAL)
        assert decode_status(finished.error).code == grpc.StatusCode.RESOURCE_EXHAUSTED
        await on_writer(server, "PRAGMA max_page_count=1073741823")
        assert (await wait_idle(stub, sid)).state == session_pb2.SESSION_STATE_IDLE
        fake_model.enqueue(TextReply("fine now"))
        assert last_of(await stream_turn(stub, sid, "again"), "run_finished").outcome == 1
    assert await on_writer(server, "PRAGMA integrity_check") == [("ok",)]
