"""The mutating tools' shared pieces: per-file locks (same file serialised, different files concurrent, no
leftover entries) and blocking I/O that a cancellation does not abandon half-way."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from general_agent_server.tools.files.edit import EditTool
from general_agent_server.tools.files.file_mutation import PathLocks, run_to_completion
from tests.unit.tools.file_support import Layout, make_layout, run_text


async def test_same_path_is_serialised_and_entries_are_dropped() -> None:
    locks = PathLocks()
    order: list[str] = []
    first_inside = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with locks.hold([Path("/w/a"), Path("/w/b")]):
            order.append("first in")
            first_inside.set()
            await release_first.wait()
            order.append("first out")

    async def second() -> None:
        await first_inside.wait()
        async with locks.hold([Path("/w/b")]):
            order.append("second in")

    async def other() -> None:
        await first_inside.wait()
        async with locks.hold([Path("/w/c")]):
            order.append("other in")

    tasks = [asyncio.create_task(job()) for job in (first, second, other)]
    await first_inside.wait()
    for _ in range(20):  # let the others run as far as they can
        await asyncio.sleep(0)
    assert order == ["first in", "other in"]
    release_first.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "other in", "first out", "second in"]
    assert len(locks) == 0


async def test_a_cancelled_waiter_leaves_no_entry() -> None:
    locks = PathLocks()
    async with locks.hold([Path("/w/a")]):
        waiter = asyncio.create_task(locks.hold([Path("/w/a")]).__aenter__())
        for _ in range(5):
            await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert len(locks) == 0


async def test_cancellation_waits_for_the_thread() -> None:
    started = threading.Event()
    release = threading.Event()
    finished: list[bool] = []

    def blocking() -> str:
        started.set()
        release.wait(timeout=30)
        finished.append(True)
        return "done"

    task = asyncio.create_task(run_to_completion(blocking))
    await asyncio.to_thread(started.wait, 30)
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()  # still waiting for the thread, though cancelled
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == [True]


async def test_concurrent_edits_of_one_file_both_apply(tmp_path: Path) -> None:
    layout: Layout = make_layout(tmp_path)
    (layout.workspace / "f.txt").write_text("".join(f"line {n}\n" for n in range(20)))
    tool = EditTool(PathLocks())
    await asyncio.gather(
        *(run_text(tool, layout, path="f.txt", oldText=f"line {n}\n", newText=f"LINE {n}\n") for n in range(20))
    )
    assert (layout.workspace / "f.txt").read_text() == "".join(f"LINE {n}\n" for n in range(20))
