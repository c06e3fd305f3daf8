"""Per-subscriber event buffers. A slow consumer never slows the run: a buffer that overflows ends that
subscriber with SLOW_CONSUMER. Events are delivered exactly as numbered (never merged here), so a live
stream and a replay from the log carry the same events byte for byte."""

from __future__ import annotations

import asyncio
from collections import deque

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import SequencedEvent


class Subscriber:
    def __init__(self, *, max_buffered: int) -> None:
        self._items: deque[SequencedEvent] = deque()
        self._wake = asyncio.Event()
        self._max = max_buffered
        self._failure: ServiceError | None = None
        self._closed = False

    def offer(self, event: SequencedEvent) -> None:
        if self._closed:
            return
        items = self._items
        if len(items) >= self._max:
            self.fail(
                ServiceError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    "SLOW_CONSUMER",
                    "the stream fell too far behind the session's events; reconnect with after_sequence",
                    metadata={"last_delivered_sequence": str(items[0].sequence - 1)},
                )
            )
            return
        items.append(event)
        self._wake.set()

    def fail(self, error: ServiceError) -> None:
        self._failure = error
        self._closed = True
        self._items.clear()
        self._wake.set()

    def close(self) -> None:
        """Ends the stream after what is buffered."""
        self._closed = True
        self._wake.set()

    async def get(self) -> SequencedEvent | None:
        """The next event; None once closed and drained. Raises the failure of a failed subscriber."""
        while True:
            if self._failure is not None:
                raise self._failure
            if self._items:
                return self._items.popleft()
            if self._closed:
                return None
            self._wake.clear()
            await self._wake.wait()
