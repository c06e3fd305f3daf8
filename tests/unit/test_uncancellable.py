"""A commit runs to its end inside its caller's task (store/uncancellable.py): whatever the coroutine waits for is
never cancelled by a cancellation of the caller, the coroutine finishes and its result is kept, and the caller is
told of the cancellation once, afterwards. A durable write's LandingFuture refuses cancel(); the group-commit loop
settles every write it holds if its task ends early, so nobody waits forever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from general_agent_server.store.group_commit import GroupCommitLoop, QueuedWrite
from general_agent_server.store.port import StoreError, WriteBatch
from general_agent_server.store.uncancellable import LandingFuture, run_to_end


async def _cancel_when_waiting(task: asyncio.Task[Any], times: int = 1) -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    for _ in range(times):
        task.cancel()


async def test_result_and_error_pass_through() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fail() -> None:
        await asyncio.sleep(0)
        raise ValueError("row conflict")

    assert await run_to_end(answer()) == 42
    with pytest.raises(ValueError, match="row conflict"):
        await run_to_end(fail())


@pytest.mark.parametrize("kind", ["landing", "plain"])
async def test_a_cancelled_caller_lets_the_coroutine_finish_then_learns_of_it(kind: str) -> None:
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[None] = LandingFuture[None](loop=loop) if kind == "landing" else loop.create_future()
    steps: list[str] = []

    async def commit() -> str:
        steps.append("queued")
        await outcome
        steps.append("memory updated")
        return "committed"

    caller = asyncio.ensure_future(run_to_end(commit()))
    await _cancel_when_waiting(caller, times=3)
    await asyncio.sleep(0)
    assert not outcome.cancelled()
    assert not caller.done()
    outcome.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert steps == ["queued", "memory updated"]


async def test_the_coroutine_reads_a_failed_outcome_itself() -> None:
    loop = asyncio.get_running_loop()
    outcome = LandingFuture[None](loop=loop)

    async def commit() -> str:
        try:
            await outcome
        except StoreError as error:
            return f"saw {error}"
        return "no error"

    caller = asyncio.ensure_future(run_to_end(commit()))
    await asyncio.sleep(0)
    outcome.set_exception(StoreError("disk full"))
    assert await caller == "saw disk full"


async def test_a_cancellation_during_a_bare_yield_is_held_until_the_end() -> None:
    done: list[int] = []

    async def steps() -> None:
        for i in range(5):
            await asyncio.sleep(0)
            done.append(i)

    caller = asyncio.ensure_future(run_to_end(steps()))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert done == [0, 1, 2, 3, 4]


async def test_the_coroutines_own_error_wins_over_a_held_cancellation() -> None:
    gate = asyncio.get_running_loop().create_future()

    async def commit() -> None:
        await gate
        raise StoreError("version conflict")

    caller = asyncio.ensure_future(run_to_end(commit()))
    await _cancel_when_waiting(caller)
    gate.set_result(None)
    with pytest.raises(StoreError, match="version conflict"):
        await caller


async def test_a_landing_future_refuses_cancel() -> None:
    outcome = LandingFuture[None](loop=asyncio.get_running_loop())
    assert outcome.cancel() is False
    assert not outcome.done()


class _HeldLoop(GroupCommitLoop[None]):
    """A store whose transactions wait until released."""

    def __init__(self) -> None:
        super().__init__(flush_interval=0.01, name="held")
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def _transaction(self, items: list[QueuedWrite[None]]) -> None:
        self.entered.set()
        await self.release.wait()


async def test_a_write_held_when_the_loop_task_ends_fails_rather_than_hangs() -> None:
    store = _HeldLoop()
    store.start()
    assert store._task is not None
    # A buffered write first, so that the loop's task (not the durable write's caller) commits the group.
    await store.submit(WriteBatch(tenant="t", session_id="s0"), durable=False)
    held = asyncio.ensure_future(store.submit(WriteBatch(tenant="t", session_id="s1")))
    await store.entered.wait()
    queued = asyncio.ensure_future(store.submit(WriteBatch(tenant="t", session_id="s2")))
    await asyncio.sleep(0)
    store._task.cancel()
    for write in (held, queued):
        with pytest.raises(StoreError, match="store closed"):
            await asyncio.wait_for(write, 5)
    with pytest.raises(StoreError, match="not open"):
        await store.submit(WriteBatch(tenant="t", session_id="s3"))


async def test_a_cancelled_submitter_is_told_after_its_write_lands() -> None:
    store = _HeldLoop()
    store.start()
    try:
        write = asyncio.ensure_future(store.submit(WriteBatch(tenant="t", session_id="s1")))
        await store.entered.wait()
        write.cancel()
        await asyncio.sleep(0)
        assert not write.done()
        store.release.set()
        with pytest.raises(asyncio.CancelledError):
            await write
    finally:
        store.release.set()
        await store.stop()


class _RecordingLoop(GroupCommitLoop[None]):
    """Records each transaction's writes and the task that ran it."""

    def __init__(self) -> None:
        super().__init__(flush_interval=0.01, name="recording")
        self.groups: list[tuple[list[str], str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def _transaction(self, items: list[QueuedWrite[None]]) -> None:
        task = asyncio.current_task()
        self.groups.append(([i.batch.session_id for i in items], task.get_name() if task else ""))
        await self.gate.wait()


async def test_an_idle_loop_lets_a_durable_write_commit_from_its_callers_task_in_order() -> None:
    store = _RecordingLoop()
    store.start()
    try:
        await asyncio.sleep(0)  # the loop's task waits for its first write
        await asyncio.create_task(store.submit(WriteBatch(tenant="t", session_id="alone")), name="caller")
        assert store.groups == [(["alone"], "caller")]
        # While one commits, later writes queue for the loop's task and commit after it, in order.
        store.gate.clear()
        first = asyncio.create_task(store.submit(WriteBatch(tenant="t", session_id="a")), name="caller-a")
        await asyncio.sleep(0)
        later = [asyncio.create_task(store.submit(WriteBatch(tenant="t", session_id=s))) for s in ("b", "c")]
        await asyncio.sleep(0)
        store.gate.set()
        await asyncio.gather(first, *later)
        assert store.groups[1:] == [(["a"], "caller-a"), (["b", "c"], "recording")]
    finally:
        await store.stop()
