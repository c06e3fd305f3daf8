"""A flag set from any thread and awaited from any loop: the fake's gates and its requests' ``disconnected`` and
``completed`` signals (a test drives :class:`FakeAnthropicThread` from another thread than the one serving)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ThreadSafeEvent:
    """A one-shot flag that can be set from any thread and awaited from any loop.

    Why not ``asyncio.Event``: that is bound to one loop and is not thread-safe,
    but :class:`FakeAnthropicThread` serves on its own loop while the test sets
    gates and waits for disconnects from another thread (or another loop).
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.set_at: float | None = None
        """``time.monotonic()`` when :meth:`set` was first called, else ``None``."""

    def is_set(self) -> bool:
        """Whether :meth:`set` has been called."""
        return self._flag.is_set()

    def set(self) -> None:
        """Set the flag and wake every waiter, whatever thread or loop it is on."""
        with self._lock:
            if self._flag.is_set():
                return
            self.set_at = time.monotonic()
            self._flag.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            # The waiter's loop may already be closed; then nobody is waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, fut)

    async def wait(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait in the running loop until set; return whether it is set.

        Takes a timeout (rather than leaving it to ``asyncio.timeout``) because
        "not set in time" is an answer here, not an error.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._flag.is_set():
                return True
            fut: asyncio.Future[None] = loop.create_future()
            entry = (loop, fut)
            self._waiters.append(entry)
        try:
            if timeout is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(fut, timeout)
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(entry)
        return self._flag.is_set()

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """Block the calling thread until set; return whether it is set."""
        return self._flag.wait(timeout)

    def __repr__(self) -> str:
        return f"ThreadSafeEvent(set={self.is_set()})"
