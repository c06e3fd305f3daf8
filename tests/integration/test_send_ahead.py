"""The events that close a run's last model call (usage_snapshot, turn_complete) go out before the run's end
commits; only run_finished waits for that commit (docs/protocol.md). A host reads them while the commit runs,
and the log still holds, byte for byte, what the stream carried — also when the end's commit fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import event_pb2
from general_agent_server.domain.records import RunStatus
from general_agent_server.store.port import StoreError, WriteBatch
from tests.conftest import ServerFactory
from tests.support.events import kinds
from tests.support.rpc import connect, create_session, events_after, read_until, turn_call, wait_idle


def wire(events: list[Any]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events]


def ends_a_run(batch: WriteBatch) -> bool:
    return any(run.status is RunStatus.FINISHED for run in batch.runs)


async def test_turn_complete_reaches_the_host_while_the_end_of_the_run_commits(
    server_factory: ServerFactory, fake_model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await server_factory()
    store = server.store
    real_write = store.write
    release = asyncio.Event()

    async def write(batch: WriteBatch, *, durable: bool = True) -> None:
        if ends_a_run(batch):
            await release.wait()  # the run's end does not land until the host has read turn_complete
        await real_write(batch, durable=durable)

    monkeypatch.setattr(store, "write", write)
    fake_model.enqueue(TextReply("hello there"))
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        call = turn_call(stub, sid, "hi")
        seen = await asyncio.wait_for(read_until(call, "turn_complete"), timeout=10)
        assert kinds(seen)[-2:] == ["usage_snapshot", "turn_complete"]
        release.set()
        live = [*seen, *await read_until(call, "run_finished")]
        assert live[-1].run_finished.outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert wire(await events_after(stub, sid, 0, live[-1].sequence)) == wire(live)


async def test_a_failed_end_commit_keeps_the_log_equal_to_the_stream(
    server_factory: ServerFactory, fake_model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end's commit fails once (a full disk): the stream carried turn_complete already, the run ends FAILED
    with the store's error, and the log holds the same events, turn_complete included."""
    server = await server_factory()
    store = server.store
    real_write = store.write
    failed: list[WriteBatch] = []

    async def write(batch: WriteBatch, *, durable: bool = True) -> None:
        if ends_a_run(batch) and not failed:
            failed.append(batch)
            raise StoreError("disk full")
        await real_write(batch, durable=durable)

    monkeypatch.setattr(store, "write", write)
    fake_model.enqueue(TextReply("hello there"))
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        live = await read_until(turn_call(stub, sid, "hi"), "run_finished")
        assert failed
        assert kinds(live)[-3:] == ["usage_snapshot", "turn_complete", "run_finished"]
        assert live[-1].run_finished.outcome == event_pb2.RUN_OUTCOME_FAILED
        await wait_idle(stub, sid)
        assert wire(await events_after(stub, sid, 0, live[-1].sequence)) == wire(live)
