"""Loads session actors on demand. An idle actor holds no task; the most recently used idle actors stay
cached so the next turn does not re-read the session and its history from the store. The cache is bounded
by count and by the estimated bytes of its sessions (sessions/footprint.py): least recently used idle actors
leave first; an actor in use is never evicted. Also holds the in-memory API key overrides, which are never
persisted.

Every actor in memory holds its session's lease in the store (spec 8.1) under this server's replica id,
renewed in the background and released when the actor leaves memory, so a second replica sharing the
store never drives the same session at the same time: it gets UNAVAILABLE until the lease is free."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from general_agent_server.domain.errors import ErrorCode, ServiceError, session_not_found
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import CallStatus
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.sessions.footprint import SessionFootprint
from general_agent_server.sessions.live import ActiveRun, ActorDeps, SessionActor

logger = logging.getLogger(__name__)

_Key = tuple[str, str]


class ActorRegistry:
    def __init__(self, deps: ActorDeps) -> None:
        self._deps = deps
        self._store = deps.store
        self._settings = deps.settings
        self._exporter = deps.exporter
        self._actors: dict[_Key, SessionActor] = {}
        # Idle actors, least recently used first; bounded by settings.max_idle_actors and, through their
        # estimated sizes, by settings.max_idle_actor_bytes.
        self._idle: OrderedDict[_Key, SessionActor] = OrderedDict()
        self._idle_sizes: dict[_Key, int] = {}
        self.idle_bytes = 0
        self._footprints: weakref.WeakKeyDictionary[SessionActor, SessionFootprint] = weakref.WeakKeyDictionary()
        self._loading: dict[_Key, asyncio.Future[SessionActor | None]] = {}
        self.memory_keys: dict[_Key, str] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ leases
    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_leases(), name="lease-renewal")

    async def close(self) -> None:
        """Stops renewing and releases the leases of every actor in memory (the process is going away)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        for actor in self.loaded():
            await self._release(actor.tenant, actor.session_id)

    async def claim(self, tenant: str, session_id: str) -> None:
        """Takes the session's lease for this replica, or fails SESSION_BUSY while another replica holds it."""
        owner = self._settings.replica_id
        if not await self._store.acquire_lease(tenant, session_id, owner, ttl_seconds=self._settings.lease_ttl_seconds):
            raise ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                "SESSION_BUSY",
                f"session {session_id!r} is held by another server replica; retry shortly",
                metadata={"session_id": session_id, "state": "HELD_ELSEWHERE"},
                retry_after_seconds=self._settings.lease_ttl_seconds / 3,
            )

    async def _release(self, tenant: str, session_id: str) -> None:
        try:
            await self._store.release_lease(tenant, session_id, self._settings.replica_id)
        except Exception:
            logger.exception("could not release the lease of session %s", session_id, extra={"category": "system"})

    async def _renew_leases(self) -> None:
        interval = self._settings.lease_ttl_seconds / 3
        while True:
            await asyncio.sleep(interval)
            for actor in self.loaded():
                try:
                    await self.claim(actor.tenant, actor.session_id)
                except ServiceError:
                    # Another replica took an expired lease: this copy is stale, drop it when it is idle.
                    logger.warning("lost the lease of session %s", actor.session_id, extra={"category": "system"})
                    if actor.idle:
                        self._unpark((actor.tenant, actor.session_id))
                except Exception:
                    logger.exception("lease renewal failed", extra={"category": "system"})

    def active(self) -> list[SessionActor]:
        return list(self._actors.values())

    def peek(self, tenant: str, session_id: str) -> SessionActor | None:
        key = (tenant, session_id)
        return self._actors.get(key) or self._idle.get(key)

    async def adopt(self, actor: SessionActor) -> None:
        """Caches the actor of a session this process just created (nothing to read back)."""
        await self.claim(actor.tenant, actor.session_id)
        actor.on_idle = self._drop_if_idle
        self._park(actor)

    @asynccontextmanager
    async def use(self, tenant: str, session_id: str) -> AsyncIterator[SessionActor]:
        """The session's actor, loaded if needed and kept while in use. NOT_FOUND for unknown ids."""
        actor = await self._acquire(tenant, session_id)
        try:
            yield actor
        finally:
            actor.users -= 1
            self._drop_if_idle(actor)

    def release_idle(self, actor: SessionActor) -> None:
        self._drop_if_idle(actor)

    def forget(self, tenant: str, session_id: str) -> None:
        """The session is gone (deleted): its lease row went with it."""
        self._actors.pop((tenant, session_id), None)
        self._unpark((tenant, session_id))
        self.memory_keys.pop((tenant, session_id), None)

    async def _acquire(self, tenant: str, session_id: str) -> SessionActor:
        key = (tenant, session_id)
        actor = self._actors.get(key)
        if actor is None and (actor := self._unpark(key)) is not None:
            self._actors[key] = actor
        if actor is None:
            actor = await self._loaded(key)
            actor = self._actors.setdefault(key, actor)
        actor.users += 1
        return actor

    async def _loaded(self, key: _Key) -> SessionActor:
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
                actor = await asyncio.shield(loading)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if loading.cancelled() and task is not None and not task.cancelling():
                    continue  # the loader's caller went away, not this one
                raise
            if actor is None:
                raise session_not_found(key[1])
            return actor

    async def _load(self, tenant: str, session_id: str) -> SessionActor | None:
        record = await self._store.get_session(tenant, session_id)
        if record is None:
            return None
        await self.claim(tenant, session_id)
        history, stored_bytes = await self._store.load_history_sized(tenant, session_id)
        await self._exporter.reconcile(tenant, session_id, self._store)
        actor = self.new_actor(record, history)
        self._footprints[actor] = SessionFootprint(history, stored_bytes)
        if record.state is SessionState.SUSPENDED and record.active_run_id:
            await self._restore_suspension(actor)
        return actor

    async def _restore_suspension(self, actor: SessionActor) -> None:
        """A suspended run survives restarts: its run row and pending round come back from the store and
        the hosted deadlines are re-armed (expired ones fire at once)."""
        record = actor.record
        run_record = await self._store.get_run(record.tenant, record.session_id, record.active_run_id)
        if run_record is None:
            return
        calls = await self._store.list_tool_calls(record.tenant, record.session_id, run_record.run_id)
        last_round = max((c.round_index for c in calls), default=0)
        actor.round = [c for c in calls if c.round_index == last_round]
        run = ActiveRun(run_id=run_record.run_id, record=run_record, model_ref=run_record.model_ref, credential=None)
        run.admitted.set()
        actor.run = run
        actor.arm_deadlines([c for c in actor.round if c.status is CallStatus.PENDING])

    def new_actor(self, record: SessionRecord, history: list[HistoryMessage]) -> SessionActor:
        actor = SessionActor(record=record, history=history, deps=self._deps)
        actor.on_idle = self._drop_if_idle
        return actor

    def _drop_if_idle(self, actor: SessionActor) -> None:
        key = (actor.tenant, actor.session_id)
        if actor.idle and self._actors.get(key) is actor:
            del self._actors[key]
            self._park(actor)

    def _park(self, actor: SessionActor) -> None:
        key = (actor.tenant, actor.session_id)
        footprint = self._footprints.get(actor)
        if footprint is None:
            footprint = self._footprints[actor] = SessionFootprint()
        size = footprint.estimate(actor.record.config, actor.history)
        self._unpark(key)
        self._idle[key] = actor
        self._idle_sizes[key] = size
        self.idle_bytes += size
        settings = self._settings
        while self._idle and (
            len(self._idle) > settings.max_idle_actors or self.idle_bytes > settings.max_idle_actor_bytes
        ):
            evicted_key, evicted = self._idle.popitem(last=False)
            self.idle_bytes -= self._idle_sizes.pop(evicted_key)
            task = asyncio.create_task(self._evicted(evicted), name=f"evict-{evicted.session_id}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _unpark(self, key: _Key) -> SessionActor | None:
        """Takes an actor out of the idle cache (it is in use again, gone, or stale)."""
        actor = self._idle.pop(key, None)
        self.idle_bytes -= self._idle_sizes.pop(key, 0)
        return actor

    async def _evicted(self, actor: SessionActor) -> None:
        """The session object ends here (a later turn loads a new one and fires session_start again)."""
        await actor.end_session_hooks(wait=False)
        if self.peek(actor.tenant, actor.session_id) is None:  # not loaded again meanwhile
            await self._release(actor.tenant, actor.session_id)

    def loaded(self) -> list[SessionActor]:
        """Every actor in memory, active or idle."""
        return [*self._actors.values(), *self._idle.values()]
