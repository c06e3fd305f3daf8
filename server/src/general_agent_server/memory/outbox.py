"""The capture outbox (docs/memory.md, "Capture and the outbox"): captured messages wait in SQLite until the
backend has them, so a capture survives a gateway outage and a restart.

A row is one captured run of one conversation, already converted and redacted. The dispatcher sends each
conversation's rows one at a time, in order, several conversations at once; a failure is retried with a
jittered, doubling backoff and a split upload resumes at the batch that failed. A failure after which the
gateway may nevertheless have the write (a POST whose answer was lost) is not sent again: the row is kept as
`ambiguous` and the conversation goes on. Rows that keep failing, or that the gateway refuses as invalid, end
`dead`. What a run already captured is counted per run, in the same transaction as its row, so a run is
never captured twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from general_agent_server.memory.port import MemoryBackend
from general_agent_server.memory.private_db import PrivateDb
from general_agent_server.memory.types import FailureKind, MemoryFailure, MemoryMessage, Scope, dumps
from general_agent_server.security.redaction import scrub

logger = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ROWS = 10_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox(
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    run_id TEXT NOT NULL, messages TEXT NOT NULL, flush INTEGER NOT NULL, turns INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL DEFAULT 0, sent_batches INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS outbox_queue ON outbox(state, tenant, user_id, agent_id, conversation_id, id);
CREATE TABLE IF NOT EXISTS captured(
    tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    run_id TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY(tenant, user_id, agent_id, conversation_id, run_id));
CREATE TABLE IF NOT EXISTS conversations(
    tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    turns INTEGER NOT NULL, PRIMARY KEY(tenant, user_id, agent_id, conversation_id));
"""
_KEY = "tenant = ? AND user_id = ? AND agent_id = ? AND conversation_id = ?"


@dataclass(frozen=True, kw_only=True, slots=True)
class Retry:
    max_attempts: int = 10
    base_delay: float = 1.0
    max_delay: float = 300.0

    def delay(self, attempts: int) -> float:
        delay: float = min(self.base_delay * 2.0 ** max(attempts - 1, 0), self.max_delay)
        return delay * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    id: int
    scope: Scope
    messages: tuple[MemoryMessage, ...]
    flush: bool
    turns: int
    attempts: int
    sent_batches: int


Converter = Callable[[int], Sequence[MemoryMessage]]


class Outbox:
    def __init__(
        self,
        path: Path,
        backend: MemoryBackend,
        *,
        retry: Retry = Retry(),
        concurrency: int = 4,
        flush_every_turns: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self._retry = retry
        self._concurrency = concurrency
        self._flush_every = flush_every_turns
        self._clock = clock
        self._db = PrivateDb(path, lambda db: db.executescript(_SCHEMA))
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set whenever a send ends
        self._task: asyncio.Task[None] | None = None
        self._inflight: dict[tuple[str, str, str, str], asyncio.Task[None]] = {}

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await self._db.run(work)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------ capture
    async def enqueue(self, scope: Scope, run_id: str, total: int, convert: Converter, *, completed: bool) -> int:
        """Queues the messages of run `run_id` not captured yet (`convert(first_index)` converts them), and
        counts the run's `total` messages as captured, in one transaction; answers the messages queued."""

        def work(db: sqlite3.Connection) -> int:
            key = [*scope.owner, scope.conversation_id]
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(f"SELECT count FROM captured WHERE {_KEY} AND run_id = ?", [*key, run_id]).fetchone()  # noqa: S608
                done = row[0] if row else 0
                messages = list(convert(done)) if total > done else []
                if messages:
                    self._insert(db, scope, run_id, messages, completed)
                db.execute(
                    "INSERT OR REPLACE INTO captured VALUES (?, ?, ?, ?, ?, ?)", [*key, run_id, max(total, done)]
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return len(messages)

        queued = await self._run(work)
        if queued:
            self._wake.set()
        return queued

    def _insert(
        self, db: sqlite3.Connection, scope: Scope, run_id: str, messages: list[MemoryMessage], completed: bool
    ) -> None:
        key = [*scope.owner, scope.conversation_id]
        turns = 1 if completed else 0
        row = db.execute(f"SELECT turns FROM conversations WHERE {_KEY}", key).fetchone()  # noqa: S608
        total_turns = (row[0] if row else 0) + turns
        db.execute("INSERT OR REPLACE INTO conversations VALUES (?, ?, ?, ?, ?)", [*key, total_turns])
        flush = bool(self._flush_every and turns and total_turns % self._flush_every == 0)
        db.execute(
            "INSERT INTO outbox(tenant, user_id, agent_id, conversation_id, run_id, messages, flush, turns, "
            "created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [*key, run_id, dumps([m.to_json() for m in messages]), int(flush), turns, self._now_ms()],
        )
        (count,) = db.execute("SELECT count(*) FROM outbox").fetchone()
        if count > MAX_ROWS:
            db.execute("DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT ?)", [count - MAX_ROWS])
            logger.warning(
                "memory outbox full: dropped %d oldest row(s)", count - MAX_ROWS, extra={"category": "system"}
            )

    # ------------------------------------------------------------------ dispatch
    async def start(self) -> None:
        if self._task is not None:
            return
        # A start is a fresh chance for what waited out a backoff before the restart.
        await self._run(lambda db: db.execute("UPDATE outbox SET next_attempt_ms = 0 WHERE state = 'pending'"))
        self._task = asyncio.create_task(self._dispatch(), name="memory-outbox")

    async def _heads(self) -> tuple[list[Row], int | None]:
        """Each conversation's oldest pending row that is due, and when the next one not due yet is."""

        def read(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(
                "SELECT o.id, o.tenant, o.user_id, o.agent_id, o.conversation_id, o.messages, o.flush, o.turns, "
                "o.attempts, o.sent_batches, o.next_attempt_ms FROM outbox o JOIN ("
                " SELECT min(id) AS id FROM outbox WHERE state = 'pending'"
                " GROUP BY tenant, user_id, agent_id, conversation_id) h ON h.id = o.id ORDER BY o.id"
            ).fetchall()

        now = self._now_ms()
        due: list[Row] = []
        later: int | None = None
        for raw in await self._run(read):
            if raw[10] > now:
                later = raw[10] if later is None else min(later, raw[10])
                continue
            scope = Scope(raw[1], raw[2], raw[3], raw[4])
            messages = tuple(MemoryMessage.from_json(m) for m in json.loads(raw[5]))
            due.append(Row(id=raw[0], scope=scope, messages=messages, flush=bool(raw[6]), turns=raw[7],
                           attempts=raw[8], sent_batches=raw[9]))  # fmt: skip
        return due, later

    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            try:
                due, later = await self._heads()
            except (sqlite3.Error, OSError):
                logger.exception("memory outbox unreadable", extra={"category": "system"})
                due, later = [], self._now_ms() + 5000
            for row in due:
                key = (*row.scope.owner, row.scope.conversation_id)
                if key in self._inflight or len(self._inflight) >= self._concurrency:
                    continue
                task = asyncio.create_task(self._send(row), name="memory-send")
                self._inflight[key] = task
                task.add_done_callback(self._done_callback(key))
            timeout = None if later is None else max((later - self._now_ms()) / 1000, 0.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _done_callback(self, key: tuple[str, str, str, str]) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self._inflight.pop(key, None)
            self._wake.set()
            self._drained.set()

        return done

    async def _send(self, row: Row) -> None:
        try:
            result = await self.backend.write(
                row.scope, row.messages, flush=row.flush, turns=row.turns, start_batch=row.sent_batches
            )
        except MemoryFailure as failure:
            await self._failed(row, failure)
            return
        except Exception as exc:  # a backend bug must not stop the queue; it is retried like an outage
            await self._failed(row, MemoryFailure(FailureKind.UPSTREAM, f"{type(exc).__name__}: {exc}"))
            return
        await self._run(lambda db: db.execute("DELETE FROM outbox WHERE id = ?", [row.id]))
        logger.info(
            "memory stored %d message(s) of conversation %s (%s) requestIds=%s",
            len(row.messages),
            row.scope.conversation_id,
            result.status,
            ",".join(result.request_ids) or "-",
            extra={"category": "system"},
        )

    async def _failed(self, row: Row, failure: MemoryFailure) -> None:
        attempts = row.attempts + 1
        if failure.ambiguous:
            state, next_at = "ambiguous", 0
        elif failure.kind is FailureKind.INVALID or attempts >= self._retry.max_attempts:
            state, next_at = "dead", 0
        else:
            state, next_at = "pending", self._now_ms() + int(self._retry.delay(attempts) * 1000)
        description = scrub(failure.describe())
        await self._run(
            lambda db: db.execute(
                "UPDATE outbox SET state = ?, attempts = ?, next_attempt_ms = ?, sent_batches = ?, last_error = ? "
                "WHERE id = ?",
                [state, attempts, next_at, max(failure.sent_batches, row.sent_batches), description, row.id],
            )
        )
        logger.warning(
            "memory write of conversation %s failed (%s, attempt %d): %s",
            row.scope.conversation_id,
            state,
            attempts,
            description,
            extra={"category": "system"},
        )

    # ------------------------------------------------------------------ inspection, shutdown
    async def counts(self, scope: Scope | None = None) -> dict[str, int]:
        """Rows by state (of one owner, or all)."""

        def read(db: sqlite3.Connection) -> dict[str, int]:
            where, params = _owner(scope)
            rows = db.execute(f"SELECT state, count(*) FROM outbox{where} GROUP BY state", params).fetchall()  # noqa: S608
            return dict(rows)

        return await self._run(read)

    async def forget(self, scope: Scope) -> int:
        """Deletes every row of the owner (any state); answers how many."""
        where, params = _owner(scope)
        return await self._run(lambda db: int(db.execute(f"DELETE FROM outbox{where}", params).rowcount))  # noqa: S608

    async def drain(self, deadline: float) -> None:
        """Waits up to `deadline` seconds for the pending rows to be sent (a row waiting out its backoff counts if
        its next attempt falls within the deadline); what is left stays for the next start."""
        if self._task is None:
            return
        end_ms = self._now_ms() + int(deadline * 1000)
        while True:
            due, later = await self._heads()
            if not due and not self._inflight and (later is None or later > end_ms):
                return
            remaining = (end_ms - self._now_ms()) / 1000
            if remaining <= 0:
                return
            wait = (
                remaining if later is None or due or self._inflight else min(remaining, (later - self._now_ms()) / 1000)
            )
            self._drained.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), max(wait, 0.0))

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._inflight.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        await self._db.aclose()


def _owner(scope: Scope | None) -> tuple[str, list[str]]:
    if scope is None:
        return "", []
    if scope.agent_id == "*":
        return " WHERE tenant = ? AND user_id = ?", [scope.tenant, scope.user_id]
    return " WHERE tenant = ? AND user_id = ? AND agent_id = ?", list(scope.owner)
