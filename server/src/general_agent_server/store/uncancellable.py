"""Waiting for a write to land even when the waiting task is cancelled, without a task of its own.

A session's commit must run to its end once begun: memory follows the store (sessions/ledger.py), so a caller
cancelled while its batch commits is told so only after the commit has landed and memory has caught up.
`asyncio.shield` gives that by running the commit as a task of its own, which costs a task, its first step, and
the shield's two futures and callbacks on every commit. `run_to_end` runs the commit's coroutine inside the
caller's task instead: it steps the coroutine itself and waits for whatever the coroutine waits for, so a
cancellation meanwhile reaches `run_to_end`, not the coroutine.

What the coroutine waits for is waited for in three ways:
- a `LandingFuture` (a durable write's outcome, store/group_commit.py; a call on the SQLite writer's thread)
  directly: its `cancel()` refuses, so the task keeps waiting for it and delivers the cancellation once it is done;
- a bare yield (`asyncio.sleep(0)`) by yielding too;
- any other future through `asyncio.shield`, so that cancelling the caller never cancels it.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class LandingFuture(asyncio.Future[T]):
    """The outcome of work that runs to its end once begun (a queued durable write, a function on the SQLite
    writer's thread): settled when the work has ended, never cancelled. A task cancelled while it waits for one is
    told of it once the future is done (asyncio's tasks handle a `cancel()` that refuses so)."""

    def cancel(self, msg: Any | None = None) -> bool:
        return False


@types.coroutine
def _bare_yield() -> Generator[None, None, None]:
    yield


async def run_to_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs `coroutine` to its end in the current task, whatever cancellations arrive meanwhile; its result or
    error is returned or raised, and a cancellation that arrived meanwhile is raised after it (as CancelledError,
    once, however many arrived)."""
    cancelled = False
    outcome: tuple[bool, Any] = (True, None)  # (succeeded, value or error) of what the coroutine waited for
    try:
        while True:
            try:
                awaited = coroutine.send(None) if outcome[0] else coroutine.throw(outcome[1])
            except StopIteration as stop:
                result: T = stop.value
                break
            outcome, was_cancelled = await _wait_for(awaited)
            cancelled = cancelled or was_cancelled
    finally:
        coroutine.close()  # a no-op once it has returned or raised
    if cancelled:
        raise asyncio.CancelledError
    return result


async def _wait_for(awaited: Any) -> tuple[tuple[bool, Any], bool]:
    """Waits for what the coroutine yielded: ((True, None), cancelled) once it is done. The coroutine reads the
    future's result itself when resumed. Anything else a coroutine yields to asyncio is an error thrown back
    into it, as asyncio's task would."""
    cancelled = False
    if awaited is None:
        try:
            await _bare_yield()
        except asyncio.CancelledError:
            cancelled = True
        return (True, None), cancelled
    if not asyncio.isfuture(awaited) or not getattr(awaited, "_asyncio_future_blocking", False):
        return (False, RuntimeError(f"run_to_end: the coroutine yielded {awaited!r}, not a future")), False
    awaited._asyncio_future_blocking = False
    while not awaited.done():
        try:
            if isinstance(awaited, LandingFuture):
                await awaited
            else:
                await asyncio.shield(awaited)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:  # noqa: S110 - the coroutine reads the failure from the future when resumed
            pass
    return (True, None), cancelled
