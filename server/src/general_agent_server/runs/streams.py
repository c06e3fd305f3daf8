"""Event streams of a session: the live subscription and the durable log stitched together, shared by
WatchSession, RunSession attachments and idempotent retries (docs/protocol.md, replay).

The live subscription starts first, then the log is replayed up to the live point, then live events not
already replayed follow: no gap, no duplicate."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import RunFinished, SequencedEvent
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.live import LiveSession
from general_agent_server.store.port import SessionStore


def events_expired(after_sequence: int, oldest: int) -> ServiceError:
    return ServiceError(
        ErrorCode.OUT_OF_RANGE,
        "EVENTS_EXPIRED",
        f"events after {after_sequence} are no longer retained; the oldest is {oldest}",
        metadata={"oldest_sequence": str(oldest)},
    )


class EventStreams:
    def __init__(self, *, store: SessionStore, cache: SessionCache, replay_batch: int) -> None:
        self._store = store
        self._cache = cache
        self._replay_batch = replay_batch

    async def events_after(
        self,
        session: LiveSession,
        after_sequence: int | None,
        *,
        on_subscribed: Callable[[], None] | None = None,
    ) -> AsyncIterator[SequencedEvent]:
        """Every event with a sequence above `after_sequence` (None: live events only), then live ones."""
        subscriber = session.subscribe()
        if on_subscribed is not None:
            on_subscribed()
        try:
            last = session.live_point if after_sequence is None else after_sequence
            if after_sequence is not None:
                async for event in self._replay(session, after_sequence):
                    yield event
                    last = event.sequence
            while (live := await subscriber.get()) is not None:
                if live.sequence <= last:
                    continue
                last = live.sequence
                yield live
        finally:
            session.unsubscribe(subscriber)
            self._cache.release_idle(session)

    async def _replay(self, session: LiveSession, after_sequence: int) -> AsyncIterator[SequencedEvent]:
        oldest = await self._store.oldest_event_sequence(session.tenant, session.session_id)
        if oldest is not None and after_sequence < oldest - 1 and oldest > 1:
            raise events_expired(after_sequence, oldest)
        await self._store.flush()
        last = after_sequence
        while True:
            batch = await self._store.read_events(
                session.tenant, session.session_id, after_sequence=last, limit=self._replay_batch
            )
            if not batch:
                return
            for event in batch:
                yield event
                last = event.sequence

    async def run_from(
        self, session: LiveSession, first_sequence: int, run_id: str | None = None
    ) -> AsyncIterator[SequencedEvent]:
        """The events from `first_sequence` (of `run_id` only, when given) up to the next run_finished."""
        async for event in self.events_after(session, first_sequence - 1):
            if run_id is not None and event.run_id != run_id:
                continue
            yield event
            if isinstance(event.body, RunFinished):
                return
