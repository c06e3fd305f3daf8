"""The ENQUEUE busy policy's queue of one session: callers wait in FIFO order until the session is idle, bounded
by `max_queued_turns` and `enqueue_timeout`; nothing is written for a queued turn until it starts, and a caller
that goes away leaves the queue."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.session import SessionRecord


class TurnQueue:
    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._tickets: deque[asyncio.Future[None]] = deque()

    def __len__(self) -> int:
        return len(self._tickets)

    async def wait(
        self,
        *,
        idle: Callable[[], bool],
        record: Callable[[], SessionRecord],
        max_queued: int,
        timeout: float,  # noqa: ASYNC109 - the queue's own bound, reported as SESSION_BUSY
    ) -> None:
        """Waits until this caller is first in line and the session is idle; the caller then starts its run
        (under the session's command lock) and calls `served`."""
        if len(self._tickets) >= max_queued:
            raise ServiceError(
                ErrorCode.RESOURCE_EXHAUSTED,
                "RESOURCE_LIMIT",
                f"session {self._session_id!r} already has {max_queued} queued turns",
                metadata={"limit": "max_queued_turns", "value": str(max_queued)},
                retry_after_seconds=1.0,
            )
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tickets.append(ticket)
        if idle() and self._tickets[0] is ticket:
            ticket.set_result(None)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(ticket)
        except TimeoutError:
            current = record()
            raise ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                "SESSION_BUSY",
                f"the queued turn waited {timeout:g}s for session {self._session_id!r}",
                metadata={"active_run_id": current.active_run_id, "state": current.state.value},
            ) from None
        finally:
            # Served, timed out or abandoned by its caller: either way it leaves the queue.
            if ticket in self._tickets:
                self._tickets.remove(ticket)
            if not ticket.done():
                ticket.cancel()

    def wake(self) -> None:
        """The session became idle (or a served caller is done): the next caller in line may go."""
        if self._tickets and not self._tickets[0].done():
            self._tickets[0].set_result(None)
