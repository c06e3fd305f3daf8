"""Forward-only schema migrations, tracked in PRAGMA user_version. Never edit a released step: add one."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from general_agent_server.store.port import StoreError

logger = logging.getLogger(__name__)

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, model history, transcript, event log, runs, idempotency keys.
    """
    CREATE TABLE sessions (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        session_key TEXT NOT NULL,
        mode TEXT NOT NULL,
        parent_session_id TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        config_json TEXT NOT NULL,
        labels_json TEXT NOT NULL,
        runtime_json TEXT NOT NULL,
        last_sequence INTEGER NOT NULL,
        sequence_reserved INTEGER NOT NULL,
        history_message_count INTEGER NOT NULL,
        create_time_us INTEGER NOT NULL,
        update_time_us INTEGER NOT NULL,
        version INTEGER NOT NULL,
        lease_owner TEXT NOT NULL DEFAULT '',
        lease_expires_us INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX sessions_by_update ON sessions (tenant, update_time_us DESC, session_id);
    CREATE TABLE history (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        run_id TEXT NOT NULL,
        format_version INTEGER NOT NULL,
        message_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, idx)
    ) WITHOUT ROWID;
    CREATE TABLE transcript (
        entry_id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        run_id TEXT NOT NULL,
        timestamp_us INTEGER NOT NULL,
        entry_json TEXT NOT NULL
    );
    CREATE INDEX transcript_by_session ON transcript (tenant, session_id, entry_id);
    CREATE TABLE events (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        run_id TEXT NOT NULL,
        create_time_us INTEGER NOT NULL,
        body_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, sequence)
    ) WITHOUT ROWID;
    CREATE TABLE runs (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        status TEXT NOT NULL,
        record_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, run_id)
    ) WITHOUT ROWID;
    CREATE INDEX runs_by_request ON runs (tenant, session_id, request_id) WHERE request_id != '';
    CREATE INDEX runs_by_status ON runs (status) WHERE status != 'FINISHED';
    CREATE TABLE idempotency (
        tenant TEXT NOT NULL,
        rpc TEXT NOT NULL,
        request_id TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        result_json TEXT NOT NULL,
        create_time_us INTEGER NOT NULL,
        PRIMARY KEY (tenant, rpc, request_id)
    ) WITHOUT ROWID;
    """,
    # 2: tool calls of every model call (local and hosted), for suspensions, idempotent submits and
    # restart recovery.
    """
    CREATE TABLE tool_calls (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        round_index INTEGER NOT NULL,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        deadline_us INTEGER,
        record_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, call_id)
    ) WITHOUT ROWID;
    CREATE INDEX tool_calls_by_run ON tool_calls (tenant, session_id, run_id, round_index, position);
    CREATE INDEX tool_calls_pending ON tool_calls (status, kind) WHERE status = 'PENDING';
    """,
    # 3: remote hook registrations (tenant-wide or per session), kept across restarts.
    """
    CREATE TABLE hook_registrations (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        plugin_id TEXT NOT NULL,
        registration_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, plugin_id)
    ) WITHOUT ROWID;
    """,
    # 4: file checkpoints. `position` (never reused) orders a session's checkpoints; the prior file contents
    # live in their own table (rowid, since rows can be large) so listing never reads them.
    """
    CREATE TABLE checkpoints (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        create_time_us INTEGER NOT NULL,
        stored_bytes INTEGER NOT NULL,
        paths_json TEXT NOT NULL
    );
    CREATE UNIQUE INDEX checkpoints_by_id ON checkpoints (tenant, session_id, checkpoint_id);
    CREATE INDEX checkpoints_by_session ON checkpoints (tenant, session_id, position);
    CREATE TABLE checkpoint_files (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        path TEXT NOT NULL,
        existed_before INTEGER NOT NULL,
        content BLOB NOT NULL,
        PRIMARY KEY (tenant, session_id, checkpoint_id, idx)
    );
    """,
    # 5: calls awaiting a person's approval are found at start-up like pending hosted calls.
    """
    CREATE INDEX tool_calls_awaiting_approval ON tool_calls (status) WHERE status = 'AWAITING_APPROVAL';
    """,
    # 6: commands for a session whose run another replica executes (sessions/relay.py).
    """
    CREATE TABLE session_commands (
        tenant TEXT NOT NULL,
        command_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        status TEXT NOT NULL,
        body_json TEXT NOT NULL,
        result_json TEXT NOT NULL DEFAULT '',
        create_time_us INTEGER NOT NULL,
        PRIMARY KEY (tenant, command_id)
    ) WITHOUT ROWID;
    CREATE INDEX session_commands_pending ON session_commands (tenant, session_id) WHERE status = 'PENDING';
    """,
    # 7: each tenant's number of sessions, kept by triggers, so the per-tenant bound (tenants/quota.py) reads one
    # row instead of counting up to 100,000 index entries on every create.
    """
    CREATE TABLE session_counts (
        tenant TEXT NOT NULL PRIMARY KEY,
        sessions INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TRIGGER sessions_counted_in AFTER INSERT ON sessions BEGIN
        INSERT INTO session_counts (tenant, sessions) VALUES (NEW.tenant, 1)
        ON CONFLICT (tenant) DO UPDATE SET sessions = sessions + 1;
    END;
    CREATE TRIGGER sessions_counted_out AFTER DELETE ON sessions BEGIN
        UPDATE session_counts SET sessions = sessions - 1 WHERE tenant = OLD.tenant;
    END;
    INSERT INTO session_counts (tenant, sessions) SELECT tenant, COUNT(*) FROM sessions GROUP BY tenant;
    """,
    # 8: each session's config in a table of its own, so a step's update of the session's row does not rewrite it
    # (store/rows.py). sessions.config_json stays, empty.
    """
    CREATE TABLE session_configs (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        config_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id)
    ) WITHOUT ROWID;
    INSERT INTO session_configs (tenant, session_id, config_json) SELECT tenant, session_id, config_json FROM sessions;
    UPDATE sessions SET config_json = '';
    """,
)


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Brings the file at `path` to the newest schema, one transaction per step. A file newer than this
    code raises StoreError and is left as it is (no downgrade).

    Each step reads the version under the write lock (BEGIN IMMEDIATE): processes opening a new file together
    (`serve --workers`) then apply each step once, the later ones finding it done."""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = _user_version(conn)
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"state file {path} has schema version {current}, newer than this server "
                    f"({len(MIGRATIONS)}); upgrade the server"
                )
            if current == len(MIGRATIONS):
                conn.execute("COMMIT")
                return
            logger.info("migrating state schema to version %d", current + 1, extra={"category": "system"})
            for statement in _statements(MIGRATIONS[current]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={current + 1}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def _statements(script: str) -> list[str]:
    """The statements of a step, one per `execute` (`executescript` would commit the open transaction first); a
    trigger's body stays whole."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending)
            pending = ""
    if pending.strip():
        raise StoreError(f"migration step ends mid-statement: {pending.strip()[:80]}")
    return statements


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0
