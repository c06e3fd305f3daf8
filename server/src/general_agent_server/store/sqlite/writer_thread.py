"""The thread the SQLite write connection lives on: functions handed to it run one at a time, in order, and each
answers on the caller's event loop.

A one-worker `ThreadPoolExecutor` does the same, but `run_in_executor` allocates a `concurrent.futures.Future`
(with its `threading.Condition`) per call and chains it to an asyncio future through two more callbacks; every
group commit pays that. Here a hand-off is one queue put and one `call_soon_threadsafe` back (bench/README.md has
the figures)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from general_agent_server.store.uncancellable import LandingFuture

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class WriterThread:
    """Started by the first `run`; `shutdown` lets it finish what is queued and end. A caller cancelled while
    its function is queued or runs does not stop the function (as with an executor): it runs to its end, and the
    caller is told of the cancellation then (the answer is dropped)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        future = LandingFuture[T](loop=loop)
        self._ensure_started()
        self._jobs.put((loop, future, fn, args))
        return await future

    def shutdown(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None

    def _ensure_started(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    # A daemon: a process that exits without closing its store is not held up by this thread
                    # (SQLite's journal keeps the file whole whatever instant it stops at).
                    self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                    self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn, args = job
            try:
                result = fn(*args)
            except BaseException as error:  # handed to the caller, whatever it is
                _answer(loop, _fail, future, error)
            else:
                _answer(loop, _succeed, future, result)


def _answer(loop: asyncio.AbstractEventLoop, settle: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
        loop.call_soon_threadsafe(settle, *args)


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
