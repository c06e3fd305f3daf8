"""The local memory backend (docs/memory.md, "The local backend"): SQLite with two FTS5 indexes over the stored
messages (`unicode61` for words, `trigram` for CJK text), no network at all.

Messages are stored by owner (tenant, user, agent) and conversation, numbered in turns (a turn starts at each
user message), unique by their `native_id`, so a repeated write stores nothing twice. Search ranks turns by
bm25 with a little recency and answers each as its user text and its final answer. The file is opened with
`secure_delete`, and a deletion ends with the indexes merged and the WAL checkpointed, so forgotten text does
not linger in the file's free pages."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from general_agent_server.memory.fts import blended, cjk_bigrams, relevance, trigram_query, word_query
from general_agent_server.memory.private_db import PrivateDb
from general_agent_server.memory.types import (
    FailureKind,
    HitKind,
    MemoryFailure,
    MemoryHit,
    MemoryMessage,
    Scope,
    StoredTurn,
    ToolCall,
    WriteResult,
    dumps,
)

T = TypeVar("T")
SCHEMA_VERSION = "1"
CANDIDATES = 200
_OWNER = "m.tenant = ? AND m.user_id = ? AND m.agent_id = ?"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages(
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL, user_id TEXT NOT NULL, agent_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    turn INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, tool_calls TEXT NOT NULL,
    tool_call_id TEXT NOT NULL, ts_ms INTEGER NOT NULL, native_id TEXT NOT NULL,
    UNIQUE(tenant, user_id, agent_id, conversation_id, native_id));
CREATE INDEX IF NOT EXISTS messages_turns ON messages(tenant, user_id, agent_id, conversation_id, turn);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE IF NOT EXISTS messages_tri USING fts5(
    content, content='messages', content_rowid='id', tokenize='trigram');
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    INSERT INTO messages_tri(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_tri(messages_tri, rowid, content) VALUES ('delete', old.id, old.content);
END;
"""


def _create_schema(db: sqlite3.Connection) -> None:
    db.executescript(_SCHEMA)
    db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))


def turn_id(conversation_id: str, turn: int) -> str:
    return f"local:turn:{conversation_id}:{turn}"


def parse_turn_id(hit_id: str) -> tuple[str, int] | None:
    prefix, _, rest = hit_id.partition("local:turn:")
    conversation, sep, number = rest.rpartition(":")
    if prefix or not sep or not conversation or not number.isdigit():
        return None
    return conversation, int(number)


class LocalMemoryBackend:
    """The MemoryBackend port over one SQLite file; also what the inspection commands use (list, delete)."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._db = PrivateDb(path, _create_schema)

    @property
    def name(self) -> str:
        return "local"

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await self._db.run(work)
        except sqlite3.Error as exc:
            raise MemoryFailure(FailureKind.UPSTREAM, f"local memory store: {exc}") from None

    # ------------------------------------------------------------------ the port
    async def search(
        self, scope: Scope, query: str, *, top_k: int, conversation_only: bool = False, exclude_conversation: str = ""
    ) -> list[MemoryHit]:
        if conversation_only:
            where, extra = " AND m.conversation_id = ?", [scope.conversation_id]
        elif exclude_conversation:
            where, extra = " AND m.conversation_id <> ?", [exclude_conversation]
        else:
            where, extra = "", []
        params = [*scope.owner, *extra]
        return await self._run(lambda db: self._search(db, query, where, params, max(top_k, 1), scope))

    def _search(
        self, db: sqlite3.Connection, query: str, where: str, params: list[str], top_k: int, scope: Scope
    ) -> list[MemoryHit]:
        scores: dict[int, float] = {}
        for table, expression in (("messages_fts", word_query(query)), ("messages_tri", trigram_query(query))):
            if not expression:
                continue
            rows = db.execute(
                f"SELECT m.id, bm25({table}) FROM {table} JOIN messages m ON m.id = {table}.rowid "  # noqa: S608
                f"WHERE {table} MATCH ? AND {_OWNER}{where} ORDER BY bm25({table}) LIMIT {CANDIDATES}",
                [expression, *params],
            ).fetchall()
            for row_id, rank in rows:
                scores[row_id] = max(scores.get(row_id, 0.0), relevance(rank))
        bigrams = cjk_bigrams(query)
        if bigrams:
            held = " + ".join("(instr(m.content, ?) > 0)" for _ in bigrams)
            rows = db.execute(
                f"SELECT m.id, {held} AS n FROM messages m WHERE {_OWNER}{where} AND n > 0 "  # noqa: S608
                f"ORDER BY n DESC, m.id DESC LIMIT {CANDIDATES}",
                [*bigrams, *params],
            ).fetchall()
            for row_id, held_count in rows:
                scores[row_id] = max(scores.get(row_id, 0.0), 0.8 * held_count / len(bigrams))
        if not scores:
            return []
        marks = ",".join("?" * len(scores))
        turns: dict[tuple[str, int], tuple[float, int]] = {}
        now = int(self._clock() * 1000)
        for row_id, conversation, turn, ts in db.execute(
            f"SELECT id, conversation_id, turn, ts_ms FROM messages WHERE id IN ({marks})",  # noqa: S608
            list(scores),
        ):
            key = (conversation, turn)
            best, newest = turns.get(key, (0.0, 0))
            turns[key] = (max(best, scores[row_id]), max(newest, ts))
        ranked = sorted(turns.items(), key=lambda item: -blended(item[1][0], now - item[1][1]))[:top_k]
        hits = []
        for (conversation, turn), (score, ts) in ranked:
            messages = self._turn(db, scope, conversation, turn)
            hits.append(
                MemoryHit(
                    id=turn_id(conversation, turn),
                    kind=HitKind.TURN,
                    text=_turn_summary(messages),
                    score=round(blended(score, now - ts), 4),
                    conversation_id=conversation,
                    timestamp_ms=ts,
                    detail=_turn_detail(messages),
                )
            )
        return hits

    def _turn(self, db: sqlite3.Connection, scope: Scope, conversation: str, turn: int) -> list[MemoryMessage]:
        rows = db.execute(
            f"SELECT role, content, tool_calls, tool_call_id, ts_ms, native_id FROM messages m "  # noqa: S608
            f"WHERE {_OWNER} AND m.conversation_id = ? AND m.turn = ? ORDER BY m.id",
            [*scope.owner, conversation, turn],
        ).fetchall()
        return [_row_message(row) for row in rows]

    async def get(self, scope: Scope, hit_id: str) -> MemoryHit | None:
        parsed = parse_turn_id(hit_id)
        if parsed is None:
            return None
        conversation, turn = parsed

        def read(db: sqlite3.Connection) -> MemoryHit | None:
            messages = self._turn(db, scope, conversation, turn)
            if not messages:
                return None
            return MemoryHit(
                id=hit_id,
                kind=HitKind.TURN,
                text=_turn_summary(messages),
                conversation_id=conversation,
                timestamp_ms=messages[-1].timestamp_ms,
                detail=_turn_detail(messages),
            )

        return await self._run(read)

    async def write(
        self, scope: Scope, messages: Sequence[MemoryMessage], *, flush: bool, turns: int, start_batch: int = 0
    ) -> WriteResult:
        stored = await self._run(lambda db: self._write(db, scope, messages))
        return WriteResult(status="stored", message_count=stored, flushed=flush)

    def _write(self, db: sqlite3.Connection, scope: Scope, messages: Sequence[MemoryMessage]) -> int:
        key = [*scope.owner, scope.conversation_id]
        stored = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            (current,) = db.execute(
                f"SELECT coalesce(max(turn), 0) FROM messages m WHERE {_OWNER} AND m.conversation_id = ?",  # noqa: S608
                key,
            ).fetchone()
            current = current or 0
            for message in messages:
                existing = db.execute(
                    f"SELECT turn FROM messages m WHERE {_OWNER} AND m.conversation_id = ? AND m.native_id = ?",  # noqa: S608
                    [*key, message.native_id],
                ).fetchone()
                if existing is not None:
                    current = existing[0] if message.role == "user" else current
                    continue
                if message.role == "user" or current == 0:
                    current += 1
                calls = dumps([[c.id, c.name, c.arguments] for c in message.tool_calls]) if message.tool_calls else ""
                db.execute(
                    "INSERT INTO messages(tenant, user_id, agent_id, conversation_id, turn, role, content, "
                    "tool_calls, tool_call_id, ts_ms, native_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [*key, current, message.role, message.content, calls, message.tool_call_id,
                     message.timestamp_ms, message.native_id],
                )  # fmt: skip
                stored += 1
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return stored

    async def context(self, scope: Scope) -> str | None:
        return None

    async def aclose(self) -> None:
        await self._db.aclose()

    # ------------------------------------------------------------------ inspection
    async def list_turns(self, scope: Scope, *, limit: int = 50) -> list[StoredTurn]:
        """The owner's stored turns, newest first (the agent is any agent when scope.agent_id is "*")."""

        def read(db: sqlite3.Connection) -> list[StoredTurn]:
            owner, params = _owner_filter(scope)
            rows = db.execute(
                f"SELECT agent_id, conversation_id, turn, max(ts_ms) FROM messages m WHERE {owner} "  # noqa: S608
                "GROUP BY agent_id, conversation_id, turn ORDER BY max(ts_ms) DESC, max(id) DESC LIMIT ?",
                [*params, limit],
            ).fetchall()
            return [
                StoredTurn(
                    id=turn_id(conversation, turn),
                    conversation_id=conversation,
                    turn=turn,
                    timestamp_ms=ts,
                    agent_id=agent,
                    messages=tuple(self._turn(db, Scope(scope.tenant, scope.user_id, agent), conversation, turn)),
                )
                for agent, conversation, turn, ts in rows
            ]

        return await self._run(read)

    async def delete(self, scope: Scope, hit_id: str = "") -> int:
        """Deletes one stored turn (`hit_id`) or every memory of the owner; answers the messages deleted."""

        def remove(db: sqlite3.Connection) -> int:
            owner, params = _owner_filter(scope)
            if hit_id:
                parsed = parse_turn_id(hit_id)
                if parsed is None:
                    return 0
                owner += " AND m.conversation_id = ? AND m.turn = ?"
                params = [*params, parsed[0], parsed[1]]
            count = db.execute(f"DELETE FROM messages AS m WHERE {owner}", params).rowcount  # noqa: S608
            if count:
                # Merged, so no segment still holds the deleted tokens; checkpointed, so the WAL does not either.
                db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
                db.execute("INSERT INTO messages_tri(messages_tri) VALUES ('optimize')")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return int(count)

        return await self._run(remove)


def _owner_filter(scope: Scope) -> tuple[str, list[Any]]:
    if scope.agent_id == "*":
        return "m.tenant = ? AND m.user_id = ?", [scope.tenant, scope.user_id]
    return _OWNER, list(scope.owner)


def _row_message(row: tuple[Any, ...]) -> MemoryMessage:
    role, content, calls, call_id, ts, native = row
    tool_calls = tuple(ToolCall(id=c[0], name=c[1], arguments=c[2]) for c in (_loads(calls) if calls else ()))
    return MemoryMessage(
        role=role, content=content, timestamp_ms=ts, native_id=native, tool_calls=tool_calls, tool_call_id=call_id
    )


def _loads(text: str) -> list[list[str]]:
    value = json.loads(text)
    return value if isinstance(value, list) else []


def _turn_summary(messages: Sequence[MemoryMessage]) -> str:
    user = next((m.content for m in messages if m.role == "user" and m.content), "")
    answer = next((m.content for m in reversed(messages) if m.role == "assistant" and m.content), "")
    parts = [f"User: {user}" if user else "", f"Assistant: {answer}" if answer else ""]
    return " / ".join(p for p in parts if p)


def _turn_detail(messages: Sequence[MemoryMessage], result_chars: int = 4096) -> str:
    lines = []
    for message in messages:
        if message.role == "tool":
            text = message.content if len(message.content) <= result_chars else message.content[:result_chars] + "…"
            lines.append(f"Tool result ({message.tool_call_id}): {text}")
            continue
        label = "User" if message.role == "user" else "Assistant"
        if message.content:
            lines.append(f"{label}: {message.content}")
        lines.extend(f"Tool call {c.name}: {c.arguments}" for c in message.tool_calls)
    return "\n".join(lines)
