"""A small TTL cache for web tool payloads: at most 100 entries, oldest evicted first (docs/tools.md); a TTL
<= 0 disables it. One per tool instance, so servers in one process do not share."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_ENTRIES = 100


class TtlCache:
    def __init__(
        self,
        ttl_seconds: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl_seconds
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self._ttl > 0

    def get(self, key: str) -> dict[str, Any] | None:
        """A copy of the stored payload, or None when absent or expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, payload = entry
        if self._clock() >= expires_at:
            del self._entries[key]
            return None
        return dict(payload)

    def put(self, key: str, payload: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._entries.pop(key, None)
        self._entries[key] = (self._clock() + self._ttl, dict(payload))
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
