"""The SQLite write connection's thread (store/sqlite/writer_thread.py): functions run one at a time on one thread,
in the order handed over; results and errors come back to the caller; a cancelled caller's function still runs
to its end, and the caller is told once it has; shutdown ends the thread after what is queued."""

from __future__ import annotations

import asyncio
import threading

import pytest

from general_agent_server.store.sqlite.writer_thread import WriterThread


async def test_functions_run_in_order_on_one_thread_that_is_not_the_loops() -> None:
    worker = WriterThread("test-writer")
    seen: list[tuple[int, str]] = []

    def record(index: int) -> int:
        seen.append((index, threading.current_thread().name))
        return index * 2

    try:
        results = await asyncio.gather(*(worker.run(record, i) for i in range(50)))
    finally:
        worker.shutdown()
    assert results == [i * 2 for i in range(50)]
    assert [index for index, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"test-writer"}


async def test_an_error_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = WriterThread("test-writer")

    def fail() -> None:
        raise ValueError("no such row")

    try:
        with pytest.raises(ValueError, match="no such row"):
            await worker.run(fail)
        assert await worker.run(lambda: "still serving") == "still serving"
    finally:
        worker.shutdown()


async def test_a_cancelled_caller_does_not_stop_its_function() -> None:
    worker = WriterThread("test-writer")
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(5)
        finished.set()
        return "done"

    try:
        call = asyncio.ensure_future(worker.run(slow))
        await asyncio.sleep(0)
        call.cancel()
        await asyncio.sleep(0)
        assert not call.done()  # told once the function has ended
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert finished.is_set()
        assert await worker.run(lambda: "next") == "next"
    finally:
        worker.shutdown()


async def test_shutdown_ends_the_thread_after_what_is_queued() -> None:
    worker = WriterThread("test-writer-shutdown")
    assert await worker.run(lambda: 1) == 1
    [thread] = [t for t in threading.enumerate() if t.name == "test-writer-shutdown"]
    worker.shutdown()
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive()
