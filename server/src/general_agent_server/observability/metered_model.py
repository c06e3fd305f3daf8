"""A model client that reports each call's latency and tokens by model to an observer, around any other
(app.py wraps the Anthropic client with it when metrics are on)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from general_agent_server.model.port import Credential, MessageComplete, ModelClient, ModelRequest, ModelStreamEvent
from general_agent_server.observability.port import Observer


class MeteredModelClient:
    def __init__(self, inner: ModelClient, observer: Observer) -> None:
        self._inner = inner
        self._observer = observer

    async def stream(self, request: ModelRequest, credential: Credential) -> AsyncIterator[ModelStreamEvent]:
        started = time.perf_counter()
        complete: MessageComplete | None = None
        try:
            async for item in self._inner.stream(request, credential):
                if isinstance(item, MessageComplete):
                    complete = item
                yield item
        finally:
            usage = complete.usage if complete is not None else None
            self._observer.model_call(request.model, time.perf_counter() - started, usage, complete is None)

    async def close(self) -> None:
        await self._inner.close()
