"""LISTEN/NOTIFY of the PostgreSQL store: every replica's commits wake every replica's waiters (store/wakeups.py).

The writer sends the notifications of a group in the group's own transaction (`notify_sql`), so PostgreSQL
delivers them at commit and only if it commits; a waiter woken by one always finds the commit. A payload is a
wake-up topic, plus the last sequence for events, well under PostgreSQL's 8000-byte limit: one too large is
replaced by WAKE_ALL. Each store holds one dedicated connection that LISTENs and feeds its WakeupHub; when it
is lost, the listener reconnects (with backoff) and then wakes every waiter, since it may have missed some.
Polling stays the fallback, so a notification lost anyway costs one poll interval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

import asyncpg

from general_agent_server.store.postgres.dsn import StoreDsn
from general_agent_server.store.wakeups import WAKE_ALL, WakeupHub

logger = logging.getLogger(__name__)

CHANNEL = "general_agent_wakeups"
MAX_PAYLOAD_BYTES = 7900
RETRY_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)
# Checks the connection this often besides its termination callback (a half-open socket reports nothing).
CHECK_SECONDS = 5.0

NOTIFY_SQL = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p"


def payloads(topics: Iterable[str]) -> list[str]:
    """The distinct payloads for `topics`, each within PostgreSQL's limit."""
    out = dict.fromkeys(t if len(t.encode()) <= MAX_PAYLOAD_BYTES else WAKE_ALL for t in topics)
    return list(out)


def topic_of(payload: str) -> str:
    """The wake-up topic of a payload (an events payload carries the sequence after the topic)."""
    return payload.rsplit("\t", 1)[0] if payload.startswith("e\t") else payload


class Listener:
    """The LISTEN connection of one store (see the module docstring)."""

    def __init__(self, dsn: StoreDsn, hub: WakeupHub) -> None:
        self._dsn = dsn
        self._hub = hub
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="postgres-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _received(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        self._hub.wake(topic_of(str(payload)))

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                conn = await asyncpg.connect(**self._dsn.connect_kwargs())
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                reason = self._dsn.scrub(str(exc))
                logger.warning("cannot LISTEN on %s: %s", self._dsn.redacted, reason, extra={"category": "system"})
                await asyncio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)])
                failures += 1
                continue
            try:
                await self._listen(conn)
                failures = 0
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                logger.warning("LISTEN connection lost: %s", self._dsn.scrub(str(exc)), extra={"category": "system"})
            finally:
                self.connected.clear()
                with contextlib.suppress(Exception):
                    await conn.close(timeout=1)
            await asyncio.sleep(RETRY_SECONDS[0])

    async def _listen(self, conn: asyncpg.Connection) -> None:
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(CHANNEL, self._received)
        self.connected.set()
        # Whatever was committed while no connection listened is found by the woken waiters' reads.
        self._hub.wake_all()
        while not lost.is_set() and not conn.is_closed():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), CHECK_SECONDS)
            if not lost.is_set():
                await conn.execute("SELECT 1", timeout=CHECK_SECONDS)  # raises once the server or the network is gone
