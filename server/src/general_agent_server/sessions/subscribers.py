"""Per-subscriber event buffers. A slow consumer never slows the run: a buffer that overflows ends that
subscriber with SLOW_CONSUMER. Events are delivered exactly as numbered (never merged here), so a live
stream and a replay from the log carry the same events byte for byte."""

from __future__ import annotations

import asyncio

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import SequencedEvent

# Consumed events are dropped from the front of a buffer once this many sit there and they are half of it.
_COMPACT_AT = 64


class Subscriber:
    """The buffer of one stream; one consumer awaits `get`. A list read from a head index and one future while the
    consumer waits, rather than a deque and an asyncio.Event (~1.5 KB more per open stream, however idle)."""

    __slots__ = ("_closed", "_failure", "_head", "_items", "_max", "_waiter")

    def __init__(self, *, max_buffered: int) -> None:
        self._items: list[SequencedEvent] = []
        self._head = 0  # items before it are consumed
        self._waiter: asyncio.Future[None] | None = None
        self._max = max_buffered
        self._failure: ServiceError | None = None
        self._closed = False

    def offer(self, event: SequencedEvent) -> None:
        if self._closed:
            return
        items = self._items
        if len(items) - self._head >= self._max:
            self.fail(
                ServiceError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    "SLOW_CONSUMER",
                    "the stream fell too far behind the session's events; reconnect with after_sequence",
                    metadata={"last_delivered_sequence": str(items[self._head].sequence - 1)},
                )
            )
            return
        items.append(event)
        self._wake()

    def fail(self, error: ServiceError) -> None:
        self._failure = error
        self._closed = True
        self._items, self._head = [], 0
        self._wake()

    def close(self) -> None:
        """Ends the stream after what is buffered."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> SequencedEvent | None:
        """The next event; None once closed and drained. Raises the failure of a failed subscriber."""
        while True:
            if self._failure is not None:
                raise self._failure
            items, head = self._items, self._head
            if head < len(items):
                event = items[head]
                head += 1
                if head == len(items):
                    items.clear()
                    head = 0
                elif head >= _COMPACT_AT and 2 * head >= len(items):
                    del items[:head]
                    head = 0
                self._head = head
                return event
            if self._closed:
                return None
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
