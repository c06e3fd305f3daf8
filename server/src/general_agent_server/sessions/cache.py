"""The loaded sessions: loaded on demand, kept while in use, and the most recently used idle ones cached so
the next turn does not re-read the session and its history from the store. An idle session holds no task.
The cache is bounded by count and by the estimated bytes of its sessions (sessions/footprint.py): least
recently used idle sessions leave first; a session in use is never evicted.

A loaded session holds no lease: a replica owns a session only while one of its runs executes here
(sessions/ownership.py; docs/architecture.md, "Replicas and leases"). So another replica sharing the store
may change a cached session meanwhile: every use compares the copy with the store's version first and reads
the session again when it differs (a session whose run executes here is never written by anyone else)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from types import TracebackType

from general_agent_server.domain.errors import ServiceError, session_not_found
from general_agent_server.domain.events import RunReason
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.runs.recovery import repair_session
from general_agent_server.sessions.deps import SessionDeps
from general_agent_server.sessions.footprint import SessionFootprint
from general_agent_server.sessions.live import LiveSession

logger = logging.getLogger(__name__)

_Key = tuple[str, str]


class SessionCache:
    def __init__(self, deps: SessionDeps) -> None:
        self._deps = deps
        self._store = deps.store
        self._settings = deps.settings
        self._exporter = deps.exporter
        self._in_use: dict[_Key, LiveSession] = {}
        # Idle sessions, least recently used first; bounded by settings.max_idle_sessions and, through their
        # estimated sizes, by settings.max_idle_session_bytes.
        self._idle: OrderedDict[_Key, LiveSession] = OrderedDict()
        self._idle_sizes: dict[_Key, int] = {}
        self.idle_bytes = 0
        self._footprints: weakref.WeakKeyDictionary[LiveSession, SessionFootprint] = weakref.WeakKeyDictionary()
        self._loading: dict[_Key, asyncio.Future[LiveSession | None]] = {}
        self._ownership = deps.ownership
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ leases
    def start(self) -> None:
        self._ownership.lost = self._lost
        self._ownership.start()

    async def close(self) -> None:
        """Stops renewing and releases the leases still held (the process is going away)."""
        await self._ownership.close()

    def _lost(self, tenant: str, session_id: str) -> None:
        """Another replica took the lease of a run executing here (this replica stalled past the TTL): the run
        stops, and its writes would conflict anyway."""
        session = self.peek(tenant, session_id)
        if session is not None:
            session.cancel_run(RunReason.INTERRUPTED)

    def active(self) -> list[LiveSession]:
        return list(self._in_use.values())

    def peek(self, tenant: str, session_id: str) -> LiveSession | None:
        key = (tenant, session_id)
        return self._in_use.get(key) or self._idle.get(key)

    async def adopt(self, session: LiveSession) -> None:
        """Caches the session of a session this process just created (nothing to read back)."""
        session.on_idle = self._drop_if_idle
        self._park(session)

    def use(self, tenant: str, session_id: str, *, revalidate: bool = True) -> SessionInUse:
        """`async with`: the session, loaded if needed and kept while in use. NOT_FOUND for unknown ids.

        `revalidate=False` hands over a cached copy as it is: only for a caller that reads the session again
        under its lease before it decides anything (a turn's admission), so the store is read once, not twice."""
        return SessionInUse(self, tenant, session_id, revalidate)

    async def _check_out(self, tenant: str, session_id: str, revalidate: bool) -> LiveSession:
        session, loaded = await self._acquire(tenant, session_id)
        try:
            if not loaded and revalidate:
                await session.revalidate()
        except ServiceError:
            session.users -= 1
            self.forget(tenant, session_id)  # deleted by another replica
            raise
        return session

    def _check_in(self, session: LiveSession) -> None:
        session.users -= 1
        self._drop_if_idle(session)

    def release_idle(self, session: LiveSession) -> None:
        self._drop_if_idle(session)

    def forget(self, tenant: str, session_id: str) -> None:
        """The session is gone (deleted): its lease row went with it."""
        self._in_use.pop((tenant, session_id), None)
        self._unpark((tenant, session_id))
        self._deps.keys.forget(tenant, session_id)

    async def _acquire(self, tenant: str, session_id: str) -> tuple[LiveSession, bool]:
        """The session in use, and whether it was just read from the store."""
        key = (tenant, session_id)
        session = self._in_use.get(key)
        if session is None and (session := self._unpark(key)) is not None:
            self._in_use[key] = session
        loaded = session is None
        if session is None:
            session = await self._loaded(key)
            session = self._in_use.setdefault(key, session)
        session.users += 1
        return session, loaded

    async def _loaded(self, key: _Key) -> LiveSession:
        """Loads a session once however many callers ask at the same time. The first caller loads; the
        others await its future. Every outcome is retrieved by the loader itself, so a failure nobody else
        waited for is never left unobserved; a loader cancelled by its client makes the others load again."""
        while True:
            loading = self._loading.get(key)
            if loading is None:
                loading = asyncio.get_running_loop().create_future()
                self._loading[key] = loading
                try:
                    loading.set_result(await self._load(*key))
                except asyncio.CancelledError:
                    loading.cancel()
                    raise
                except Exception as exc:
                    loading.set_exception(exc)
                finally:
                    del self._loading[key]
            try:
                session = await asyncio.shield(loading)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if loading.cancelled() and task is not None and not task.cancelling():
                    continue  # the loader's caller went away, not this one
                raise
            if session is None:
                raise session_not_found(key[1])
            return session

    async def _load(self, tenant: str, session_id: str) -> LiveSession | None:
        record = await self._store.get_session(tenant, session_id)
        if record is None:
            return None
        # Left RUNNING: another replica's live run (left alone), or a dead one's, repaired once its lease expired.
        if record.state is SessionState.RUNNING and await self._repair(tenant, session_id):
            record = await self._store.get_session(tenant, session_id)
            if record is None:
                return None
        history, stored_bytes = await self._store.load_history_sized(tenant, session_id)
        await self._exporter.reconcile(tenant, session_id, self._store)
        session = self.new_session(record, history)
        self._footprints[session] = SessionFootprint(history, stored_bytes)
        if record.state is SessionState.SUSPENDED and record.active_run_id:
            await session.restore_stored_suspension()
        return session

    async def _repair(self, tenant: str, session_id: str) -> bool:
        if self._ownership.holds(tenant, session_id):
            return False
        settings = self._settings
        repaired = await repair_session(
            self._store,
            tenant,
            session_id,
            owner=settings.replica_id,
            ttl_seconds=settings.lease_ttl_seconds,
            sequence_block=settings.sequence_block,
        )
        return repaired > 0

    def new_session(self, record: SessionRecord, history: list[HistoryMessage]) -> LiveSession:
        session = LiveSession(record=record, history=history, deps=self._deps)
        session.on_idle = self._drop_if_idle
        return session

    def _drop_if_idle(self, session: LiveSession) -> None:
        key = (session.tenant, session.session_id)
        if session.idle and self._in_use.get(key) is session:
            del self._in_use[key]
            self._park(session)

    def _park(self, session: LiveSession) -> None:
        key = (session.tenant, session.session_id)
        footprint = self._footprints.get(session)
        if footprint is None:
            footprint = self._footprints[session] = SessionFootprint()
        # The kept encoding of its history (model/history_encoding.py) is about as large as the history's JSON.
        size = footprint.estimate(session.record.config, session.history) + session.history_encoding.kept_bytes
        self._unpark(key)
        self._idle[key] = session
        self._idle_sizes[key] = size
        self.idle_bytes += size
        settings = self._settings
        while self._idle and (
            len(self._idle) > settings.max_idle_sessions or self.idle_bytes > settings.max_idle_session_bytes
        ):
            evicted_key, evicted = self._idle.popitem(last=False)
            self.idle_bytes -= self._idle_sizes.pop(evicted_key)
            task = asyncio.create_task(self._evicted(evicted), name=f"evict-{evicted.session_id}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _unpark(self, key: _Key) -> LiveSession | None:
        """Takes a session out of the idle cache (it is in use again, gone, or stale)."""
        session = self._idle.pop(key, None)
        self.idle_bytes -= self._idle_sizes.pop(key, 0)
        return session

    async def _evicted(self, session: LiveSession) -> None:
        """The session object ends here (a later turn loads a new one and fires session_start again)."""
        await session.end_session_hooks(wait=False)
        if self.peek(session.tenant, session.session_id) is None and self._deps.mcp is not None:  # not loaded again
            await self._deps.mcp.close_session(session.tenant, session.session_id)

    def loaded(self) -> list[LiveSession]:
        """Every session in memory, active or idle."""
        return [*self._in_use.values(), *self._idle.values()]


class SessionInUse:
    """What `SessionCache.use` returns: the session is in use from `__aenter__` to `__aexit__`. A class, not a
    generator context manager: every RPC enters one, and a watch holds it for as long as its stream is open, so
    it keeps no generator frame alive."""

    __slots__ = ("_cache", "_revalidate", "_session", "_session_id", "_tenant")

    def __init__(self, cache: SessionCache, tenant: str, session_id: str, revalidate: bool) -> None:
        self._cache, self._tenant, self._session_id, self._revalidate = cache, tenant, session_id, revalidate
        self._session: LiveSession | None = None

    async def __aenter__(self) -> LiveSession:
        self._session = await self._cache._check_out(self._tenant, self._session_id, self._revalidate)
        return self._session

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        session, self._session = self._session, None
        if session is not None:
            self._cache._check_in(session)
