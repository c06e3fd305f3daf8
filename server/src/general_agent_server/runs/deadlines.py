"""The armed deadlines of a suspended run's hosted calls (absolute times, stored with the calls); expiry calls
back with the call id, and the session resolves the call as an error under its command lock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.records import CallStatus, ToolCallRecord


class Deadlines:
    """The armed deadlines of a suspended run's hosted calls; expiry calls `on_expire(call_id)`."""

    def __init__(self, on_expire: Callable[[str], None]) -> None:
        self._on_expire = on_expire
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def arm(self, records: list[ToolCallRecord]) -> None:
        loop = asyncio.get_running_loop()
        for record in records:
            deadline = record.deadline
            if record.status is CallStatus.AWAITING_APPROVAL and record.approval is not None:
                deadline = record.approval.deadline
            if deadline is None or record.call_id in self._handles:
                continue
            delay = max(0.0, (deadline - utcnow()).total_seconds())
            self._handles[record.call_id] = loop.call_later(delay, self._fire, record.call_id)

    def disarm(self, call_id: str | None = None) -> None:
        if call_id is not None:
            handle = self._handles.pop(call_id, None)
            if handle is not None:
                handle.cancel()
            return
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def _fire(self, call_id: str) -> None:
        self._handles.pop(call_id, None)
        self._on_expire(call_id)
