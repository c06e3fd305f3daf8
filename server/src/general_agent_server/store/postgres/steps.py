"""A session step's row on PostgreSQL, written in one statement with what rides on it.

The compare-and-set UPDATE of the session row comes first (a CTE whose RETURNING says whether it matched); the
lease the step takes or frees is in its SET and WHERE, and its config, events, new history messages and run rows
ride on it as data-modifying CTEs, each table's rows passed as arrays, each written only when the UPDATE matched.
A step is one round trip instead of one per table, and a step whose compare-and-set fails writes nothing and
raises VersionConflictError, never a key conflict with rows of the version it missed. Rows a CTE cannot take in
one INSERT (a history replaced whole or a transcript cleared, which need their DELETE first; two rows of one run
or of one tool call, which ON CONFLICT may not touch twice) are left to the per-table statements in writes.py,
which `StepParts` tells what is left."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from general_agent_server.domain import codec
from general_agent_server.domain.session import SessionRecord
from general_agent_server.store.port import VersionConflictError, WriteBatch
from general_agent_server.store.rows import config_document, session_columns, to_us
from general_agent_server.store.session_steps import lease_clauses, refused_step

Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"

_SESSION_UPDATE = (
    "UPDATE sessions SET session_key=$1, mode=$2, parent_session_id=$3, state=$4, labels_json=$5,"
    " runtime_json=$6, last_sequence=$7, sequence_reserved=$8, history_message_count=$9, update_time_us=$10,"
    " version=$11"
)
_SESSION_WHERE = " WHERE tenant=$12 AND session_id=$13 AND version=$14"


@dataclass(frozen=True, slots=True)
class StepParts:
    """Which of the batch's rows the step's statement wrote."""

    events: bool
    history: bool
    runs: bool
    transcript: bool
    tool_calls: bool


def whole_in_one_statement(batch: WriteBatch) -> bool:
    """Whether the step's statement writes every row of `batch` (with no operation beside it): it then needs no
    transaction around it, a single statement being atomic on its own (store/postgres/writer.py)."""
    return (
        batch.session is not None
        and not batch.replace_history
        and not batch.clear_transcript
        and batch.idempotency is None
        and not batch.hook_registrations
        and _distinct_runs(batch)
        and _distinct_calls(batch)
    )


async def write_step(
    conn: Conn, record: SessionRecord, batch: WriteBatch, *, wakeups: tuple[str, list[str]] | None = None
) -> StepParts:
    """The compare-and-set: stores `record` only over version `record.version - 1`, with the batch's lease, its
    config unless the batch says it is as stored (WriteBatch.config_unchanged), and the rows that ride on it.
    `wakeups` (a channel and its payloads): sent with `pg_notify` by the statement, when the step is written."""
    statement = _Statement([*session_columns(record)[2:], record.tenant, record.session_id, record.version - 1])
    if not batch.config_unchanged:
        config = statement.arg(config_document(record))
        statement.ctes.append(
            f"config AS (UPDATE session_configs SET config_json={config} WHERE tenant=$12 AND session_id=$13"  # noqa: S608 - placeholders only
            f" AND config_json IS DISTINCT FROM {config} AND EXISTS (SELECT 1 FROM step))"
        )
    parts = StepParts(
        events=_events(statement, batch),
        history=_history(statement, batch),
        runs=_runs(statement, batch),
        transcript=_transcript(statement, batch),
        tool_calls=_tool_calls(statement, batch),
    )
    main = "SELECT count(*) FROM step"
    if wakeups is not None:
        channel, payloads = statement.arg(wakeups[0]), statement.arg(wakeups[1])
        statement.ctes.append(
            f"wake AS (SELECT pg_notify({channel}, p) FROM unnest({payloads}::text[]) AS p"  # noqa: S608 - placeholders only
            " WHERE EXISTS (SELECT 1 FROM step))"
        )
        main += " CROSS JOIN (SELECT count(*) FROM wake) AS woken"  # a plain CTE runs only when referenced
    numbers = itertools.count(len(statement.args) + 1)
    lease = lease_clauses(batch, lambda: f"${next(numbers)}")
    statement.args += [*lease.set_args, *lease.where_args]
    update = f"{_SESSION_UPDATE}{lease.set_sql}{_SESSION_WHERE}{lease.where_sql}"
    statement.ctes.insert(0, f"step AS ({update} RETURNING 1)")
    if await conn.fetchval(statement.sql(main), *statement.args) != 1:
        stored = await conn.fetchval(
            "SELECT version FROM sessions WHERE tenant=$1 AND session_id=$2", batch.tenant, batch.session_id
        )
        raise VersionConflictError(refused_step(batch, stored, record.version - 1))
    return parts


Column: TypeAlias = tuple[str, list[Any], str]  # name, one value per row, SQL type


class _Statement:
    """The statement being built: its arguments, numbered in order, and its CTEs."""

    def __init__(self, args: list[object]) -> None:
        self.args = args
        self.ctes: list[str] = []

    def arg(self, value: object) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def insert(
        self, table: str, columns: Sequence[Column], *, key: Sequence[str] = (), of_session: bool = True
    ) -> None:
        """A CTE inserting rows into `table` when the step matched, each column passed as one array argument.
        `of_session`: the rows take the step's tenant and session id. `key`: a conflict on it replaces the row's
        other columns. Rows go in in their order, so a serial column numbers them in it (the transcript's)."""
        names = [name for name, _, _ in columns]
        arrays = ", ".join(f"{self.arg(values)}::{kind}[]" for _, values, kind in columns)
        into = ["tenant", "session_id", *names] if of_session else names
        values = ["$12", "$13", *names] if of_session else names
        sql = (
            f"{table}_in AS (INSERT INTO {table} ({', '.join(into)}) SELECT {', '.join(values)}"  # noqa: S608 - names and placeholders only
            f" FROM unnest({arrays}) WITH ORDINALITY AS r({', '.join(names)}, place)"
            " WHERE EXISTS (SELECT 1 FROM step) ORDER BY r.place"
        )
        if key:
            updated = ", ".join(f"{name}=EXCLUDED.{name}" for name in into if name not in key)
            sql += f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updated}"
        self.ctes.append(sql + ")")

    def sql(self, main: str) -> str:
        return f"WITH {', '.join(self.ctes)} {main}"


def _events(statement: _Statement, batch: WriteBatch) -> bool:
    events = batch.events
    if not events:
        return False
    statement.insert(
        "events",
        [
            ("sequence", [e.sequence for e in events], "bigint"),
            ("run_id", [e.run_id for e in events], "text"),
            ("create_time_us", [to_us(e.create_time) for e in events], "bigint"),
            ("body_json", [codec.EVENT_BODY.dumps(e.body) for e in events], "text"),
        ],
    )
    return True


def _history(statement: _Statement, batch: WriteBatch) -> bool:
    messages = batch.history
    if not messages or batch.replace_history:
        return False
    statement.insert(
        "history",
        [
            ("idx", [batch.history_base + i for i in range(len(messages))], "bigint"),
            ("run_id", [m.run_id for m in messages], "text"),
            ("format_version", [m.format_version for m in messages], "integer"),
            ("message_json", [codec.HISTORY_MESSAGE.dumps(m) for m in messages], "text"),
        ],
        key=("tenant", "session_id", "idx"),
    )
    return True


def _transcript(statement: _Statement, batch: WriteBatch) -> bool:
    """The entries in their order: `insert` takes them in their order, so their entry ids (a sequence, drawn row by
    row as rows are inserted) keep the order the transcript is read in."""
    entries = batch.transcript
    if not entries or batch.clear_transcript:
        return False
    statement.insert(
        "transcript",
        [
            ("sequence", [e.sequence for e in entries], "bigint"),
            ("run_id", [e.run_id for e in entries], "text"),
            ("timestamp_us", [to_us(e.timestamp) for e in entries], "bigint"),
            ("entry_json", [codec.TRANSCRIPT_BODY.dumps(e.body) for e in entries], "text"),
        ],
    )
    return True


def _distinct_runs(batch: WriteBatch) -> bool:
    """No two run rows of the batch are one run's (ON CONFLICT may not touch a row twice in one INSERT)."""
    return len({(r.tenant, r.session_id, r.run_id) for r in batch.runs}) == len(batch.runs)


def _distinct_calls(batch: WriteBatch) -> bool:
    return len({(c.tenant, c.session_id, c.call_id) for c in batch.tool_calls}) == len(batch.tool_calls)


def _runs(statement: _Statement, batch: WriteBatch) -> bool:
    runs = batch.runs
    if not runs or not _distinct_runs(batch):
        return False
    named = [(name, [getattr(r, name) for r in runs], "text") for name in ("tenant", "session_id", "run_id")]
    statement.insert(
        "runs",
        [
            *named,
            ("request_id", [r.request_id for r in runs], "text"),
            ("status", [r.status.value for r in runs], "text"),
            ("record_json", [codec.RUN_RECORD.dumps(r) for r in runs], "text"),
        ],
        key=("tenant", "session_id", "run_id"),
        of_session=False,
    )
    return True


def _tool_calls(statement: _Statement, batch: WriteBatch) -> bool:
    calls = batch.tool_calls
    if not calls or not _distinct_calls(batch):
        return False
    named = [(name, [getattr(c, name) for c in calls], "text") for name in ("tenant", "session_id", "call_id")]
    statement.insert(
        "tool_calls",
        [
            *named,
            ("run_id", [c.run_id for c in calls], "text"),
            ("round_index", [c.round_index for c in calls], "bigint"),
            ("position", [c.position for c in calls], "bigint"),
            ("kind", [c.kind.value for c in calls], "text"),
            ("status", [c.status.value for c in calls], "text"),
            ("deadline_us", [to_us(c.deadline) if c.deadline else None for c in calls], "bigint"),
            ("record_json", [codec.TOOL_CALL.dumps(c) for c in calls], "text"),
        ],
        key=("tenant", "session_id", "call_id"),
        of_session=False,
    )
    return True
