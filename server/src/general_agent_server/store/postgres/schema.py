"""The PostgreSQL schema: forward-only migrations tracked in `general_agent_schema`, applied under an advisory lock
so replicas starting together migrate once. Never edit a released step: add one. The tables mirror the SQLite
store's (store/sqlite/migrations.py): timestamps as integer microseconds, records as JSON text."""

from __future__ import annotations

import logging
from typing import Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from general_agent_server.store.port import StoreError

logger = logging.getLogger(__name__)

# A connection of its own or one borrowed from the pool.
Conn: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"

# pg_advisory_xact_lock key of the migrations ("ga" + "schema" in ASCII, any fixed number works).
MIGRATION_LOCK = 0x6761736368656D61

MIGRATIONS: tuple[str, ...] = (
    # 1: everything the SQLite store has at its version 5.
    """
    CREATE TABLE sessions (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, session_key TEXT NOT NULL, mode TEXT NOT NULL,
        parent_session_id TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, config_json TEXT NOT NULL,
        labels_json TEXT NOT NULL, runtime_json TEXT NOT NULL, last_sequence BIGINT NOT NULL,
        sequence_reserved BIGINT NOT NULL, history_message_count BIGINT NOT NULL, create_time_us BIGINT NOT NULL,
        update_time_us BIGINT NOT NULL, version BIGINT NOT NULL, lease_owner TEXT NOT NULL DEFAULT '',
        lease_expires_us BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant, session_id)
    );
    CREATE INDEX sessions_by_update ON sessions (tenant, update_time_us DESC, session_id);
    CREATE TABLE history (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, idx BIGINT NOT NULL, run_id TEXT NOT NULL,
        format_version INTEGER NOT NULL, message_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, idx)
    );
    CREATE TABLE transcript (
        entry_id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, session_id TEXT NOT NULL, sequence BIGINT NOT NULL,
        run_id TEXT NOT NULL, timestamp_us BIGINT NOT NULL, entry_json TEXT NOT NULL
    );
    CREATE INDEX transcript_by_session ON transcript (tenant, session_id, entry_id);
    CREATE TABLE events (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, sequence BIGINT NOT NULL, run_id TEXT NOT NULL,
        create_time_us BIGINT NOT NULL, body_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, sequence)
    );
    CREATE TABLE runs (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, run_id TEXT NOT NULL, request_id TEXT NOT NULL,
        status TEXT NOT NULL, record_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, run_id)
    );
    CREATE INDEX runs_by_request ON runs (tenant, session_id, request_id) WHERE request_id != '';
    CREATE INDEX runs_by_status ON runs (status) WHERE status != 'FINISHED';
    CREATE TABLE idempotency (
        tenant TEXT NOT NULL, rpc TEXT NOT NULL, request_id TEXT NOT NULL, body_hash TEXT NOT NULL,
        result_json TEXT NOT NULL, create_time_us BIGINT NOT NULL,
        PRIMARY KEY (tenant, rpc, request_id)
    );
    CREATE TABLE tool_calls (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, call_id TEXT NOT NULL, run_id TEXT NOT NULL,
        round_index BIGINT NOT NULL, position BIGINT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
        deadline_us BIGINT, record_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, call_id)
    );
    CREATE INDEX tool_calls_by_run ON tool_calls (tenant, session_id, run_id, round_index, position);
    CREATE INDEX tool_calls_waiting ON tool_calls (status) WHERE status IN ('PENDING', 'AWAITING_APPROVAL');
    CREATE TABLE hook_registrations (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, plugin_id TEXT NOT NULL, registration_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id, plugin_id)
    );
    CREATE TABLE checkpoints (
        position BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, session_id TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL, tool_name TEXT NOT NULL,
        create_time_us BIGINT NOT NULL, stored_bytes BIGINT NOT NULL, paths_json TEXT NOT NULL
    );
    CREATE UNIQUE INDEX checkpoints_by_id ON checkpoints (tenant, session_id, checkpoint_id);
    CREATE INDEX checkpoints_by_session ON checkpoints (tenant, session_id, position);
    CREATE TABLE checkpoint_files (
        tenant TEXT NOT NULL, session_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL, idx INTEGER NOT NULL,
        path TEXT NOT NULL, existed_before BOOLEAN NOT NULL, content BYTEA NOT NULL,
        PRIMARY KEY (tenant, session_id, checkpoint_id, idx)
    );
    """,
    # 2: commands for a session whose run another replica executes (SQLite version 6).
    """
    CREATE TABLE session_commands (
        tenant TEXT NOT NULL, command_id TEXT NOT NULL, session_id TEXT NOT NULL, status TEXT NOT NULL,
        body_json TEXT NOT NULL, result_json TEXT NOT NULL DEFAULT '', create_time_us BIGINT NOT NULL,
        PRIMARY KEY (tenant, command_id)
    );
    CREATE INDEX session_commands_pending ON session_commands (tenant, session_id) WHERE status = 'PENDING';
    """,
    # 3: each tenant's number of sessions, kept by a trigger (SQLite version 7). The trigger comes first: it locks
    # the sessions table against writes until the migration commits, so the backfill misses none.
    """
    CREATE TABLE session_counts (
        tenant TEXT NOT NULL PRIMARY KEY,
        sessions BIGINT NOT NULL
    );
    CREATE FUNCTION general_agent_count_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO session_counts (tenant, sessions) VALUES (NEW.tenant, 1)
            ON CONFLICT (tenant) DO UPDATE SET sessions = session_counts.sessions + 1;
        ELSE
            UPDATE session_counts SET sessions = sessions - 1 WHERE tenant = OLD.tenant;
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER sessions_counted AFTER INSERT OR DELETE ON sessions
        FOR EACH ROW EXECUTE FUNCTION general_agent_count_sessions();
    INSERT INTO session_counts (tenant, sessions) SELECT tenant, COUNT(*) FROM sessions GROUP BY tenant;
    """,
    # 4: each session's config in a table of its own (SQLite version 8). sessions.config_json stays, empty.
    """
    LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE;
    CREATE TABLE session_configs (
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        config_json TEXT NOT NULL,
        PRIMARY KEY (tenant, session_id)
    );
    INSERT INTO session_configs (tenant, session_id, config_json) SELECT tenant, session_id, config_json FROM sessions;
    UPDATE sessions SET config_json = '';
    """,
)


async def migrate(conn: Conn) -> int:
    """Brings the database to the newest schema, in one transaction; returns the version. A database newer
    than this code raises StoreError and is left as it is (no downgrade)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute("CREATE TABLE IF NOT EXISTS general_agent_schema (version INTEGER NOT NULL)")
        current = await conn.fetchval("SELECT max(version) FROM general_agent_schema") or 0
        if current > len(MIGRATIONS):
            raise StoreError(
                f"the database has schema version {current}, newer than this server ({len(MIGRATIONS)}); "
                "upgrade the server"
            )
        for version in range(current + 1, len(MIGRATIONS) + 1):
            logger.info("migrating the PostgreSQL schema to version %d", version, extra={"category": "system"})
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO general_agent_schema (version) VALUES ($1)", version)
    return len(MIGRATIONS)
