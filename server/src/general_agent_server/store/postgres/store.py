"""SessionStore on PostgreSQL through asyncpg, for replicas on several hosts (docs/deployment.md). The same
conformance suite as SQLite (store.testing) proves it. Writes go through one ordered writer (writer.py); reads
use the pool and see committed data. The DSN's password never appears in logs or errors (dsn.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg

from general_agent_server.domain import codec
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import IdempotencyRecord, RunRecord, RunStatus, ToolCallRecord
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.observability.port import Observer
from general_agent_server.store.port import ListCursor, SessionCommand, SessionQuery, StoreError, WriteBatch
from general_agent_server.store.postgres import commands, reads, writes
from general_agent_server.store.postgres.dsn import StoreDsn
from general_agent_server.store.postgres.listener import CHANNEL, NOTIFY_SQL, Listener, payloads
from general_agent_server.store.postgres.schema import migrate
from general_agent_server.store.postgres.writer import PgWriter
from general_agent_server.store.rows import SESSION_SELECT, command_from_row, now_us, record_from_row, to_us
from general_agent_server.store.wakeups import Subscription, WakeupHub, events_topic
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointInfo


class PostgresSessionStore:
    """See the module docstring."""

    def __init__(self, dsn: StoreDsn, *, flush_interval: float = 0.02, pool_size: int = 8, notify: bool = True) -> None:
        """`notify` off: no NOTIFY is sent (tests use it to show what polling alone delivers)."""
        self.dsn = dsn
        self._notify = notify
        self.wakeups = WakeupHub()
        self._listener: Listener | None = None
        self._flush_interval = flush_interval
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._writer: PgWriter | None = None
        self._observer: Observer | None = None

    async def open(self) -> None:
        try:
            pool = await asyncpg.create_pool(
                min_size=1, max_size=self._pool_size, command_timeout=60, **self.dsn.connect_kwargs()
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot connect to {self.dsn.redacted}: {self.dsn.scrub(str(exc))}") from None
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool
        self._writer = PgWriter(pool, flush_interval=self._flush_interval, notify=self._notify)
        self._writer.observer = self._observer
        self._listener = Listener(self.dsn, self.wakeups)
        self._listener.start()
        # Commits from here on wake this store's waiters: LISTEN is in place before open returns (unless it
        # cannot connect yet; it keeps trying, and polling covers the gap).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listener.connected.wait(), 10)

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _p(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("store is not open")
        return self._pool

    async def _submit(
        self, batch: WriteBatch, *, durable: bool = True, operation: writes.PgOperation | None = None
    ) -> None:
        if self._writer is None:
            raise StoreError("store is not open")
        await self._writer.submit(batch, durable=durable, operation=operation)

    async def _operation(self, tenant: str, session_id: str, operation: writes.PgOperation) -> None:
        await self._submit(WriteBatch(tenant=tenant, session_id=session_id), operation=operation)

    # ------------------------------------------------------------------ writes and sessions
    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        await self._submit(batch, durable=durable)

    async def flush(self) -> None:
        await self._submit(WriteBatch(tenant="", session_id=""))

    async def create_session(self, record: SessionRecord, *, batch: WriteBatch | None = None) -> None:
        first = batch or WriteBatch(tenant=record.tenant, session_id=record.session_id)
        await self._submit(first, operation=writes.InsertSession(record=record))

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord | None:
        row = await self._p().fetchrow(SESSION_SELECT + " WHERE tenant=$1 AND session_id=$2", tenant, session_id)
        return record_from_row(tuple(row)) if row else None

    async def list_sessions(
        self, tenant: str, query: SessionQuery, *, after: ListCursor | None, limit: int
    ) -> list[SessionRecord]:
        sql, params = reads.list_sessions_query(tenant, query, after, limit)
        return [record_from_row(tuple(r)) for r in await self._p().fetch(sql, *params)]

    def observe(self, observer: Observer) -> None:
        """Group commits are reported to `observer` (metrics, observability/port.py)."""
        self._observer = observer
        if self._writer is not None:
            self._writer.observer = observer

    async def count_sessions(self, tenant: str) -> int:
        """The tenant's sessions (tenants/quota.py), as the trigger of migration 3 keeps them."""
        count = await self._p().fetchval("SELECT sessions FROM session_counts WHERE tenant=$1", tenant)
        return int(count or 0)

    async def delete_session(self, tenant: str, session_id: str) -> bool:
        marker = writes.DeleteSession()
        await self._operation(tenant, session_id, marker)
        return marker.deleted

    # ------------------------------------------------------------------ history, transcript, events
    async def load_history(self, tenant: str, session_id: str) -> list[HistoryMessage]:
        return (await self.load_history_sized(tenant, session_id))[0]

    async def load_history_sized(self, tenant: str, session_id: str) -> tuple[list[HistoryMessage], int]:
        rows = await self._p().fetch(
            "SELECT message_json FROM history WHERE tenant=$1 AND session_id=$2 ORDER BY idx", tenant, session_id
        )
        return [codec.HISTORY_MESSAGE.loads(r[0]) for r in rows], sum(len(r[0]) for r in rows)

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]:
        return await reads.read_transcript(self._p(), tenant, session_id, after_entry_id, limit)

    async def count_transcript(self, tenant: str, session_id: str) -> int:
        sql = "SELECT COUNT(*) FROM transcript WHERE tenant=$1 AND session_id=$2"
        return int(await self._p().fetchval(sql, tenant, session_id) or 0)

    async def read_events(
        self, tenant: str, session_id: str, *, after_sequence: int, limit: int
    ) -> list[SequencedEvent]:
        return await reads.read_events(self._p(), tenant, session_id, after_sequence, limit)

    async def purge_events(self, tenant: str, session_id: str, *, keep_last: int, older_than: datetime) -> None:
        operation = writes.PurgeEvents(keep_last=max(1, keep_last), older_than_us=to_us(older_than))
        await self._operation(tenant, session_id, operation)

    async def oldest_event_sequence(self, tenant: str, session_id: str) -> int | None:
        sql = "SELECT MIN(sequence) FROM events WHERE tenant=$1 AND session_id=$2"
        value = await self._p().fetchval(sql, tenant, session_id)
        return int(value) if value is not None else None

    async def newest_event_sequences(self, sessions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        if not sessions:
            return {}
        sql = (
            "SELECT k.t, k.s, (SELECT MAX(sequence) FROM events WHERE tenant=k.t AND session_id=k.s)"
            " FROM unnest($1::text[], $2::text[]) AS k(t, s)"
        )
        rows = await self._p().fetch(sql, [t for t, _ in sessions], [s for _, s in sessions])
        return {(t, s): int(m) for t, s, m in rows if m is not None}

    # ------------------------------------------------------------------ runs and tool calls
    async def _records(self, sql: str, *params: Any) -> list[Any]:
        return [r[0] for r in await self._p().fetch(sql, *params)]

    async def get_run(self, tenant: str, session_id: str, run_id: str) -> RunRecord | None:
        sql = "SELECT record_json FROM runs WHERE tenant=$1 AND session_id=$2 AND run_id=$3"
        found = await self._records(sql, tenant, session_id, run_id)
        return codec.RUN_RECORD.loads(found[0]) if found else None

    async def find_run_by_request_id(self, tenant: str, session_id: str, request_id: str) -> RunRecord | None:
        sql = "SELECT record_json FROM runs WHERE tenant=$1 AND session_id=$2 AND request_id=$3"
        found = await self._records(sql, tenant, session_id, request_id)
        return codec.RUN_RECORD.loads(found[0]) if found else None

    async def list_runs(self, tenant: str, session_id: str) -> list[RunRecord]:
        found = await self._records(
            "SELECT record_json FROM runs WHERE tenant=$1 AND session_id=$2", tenant, session_id
        )
        return sorted((codec.RUN_RECORD.loads(r) for r in found), key=lambda r: r.first_sequence)

    async def list_unfinished_runs(self) -> list[RunRecord]:
        found = await self._records("SELECT record_json FROM runs WHERE status != $1", RunStatus.FINISHED.value)
        return [codec.RUN_RECORD.loads(r) for r in found]

    async def list_tool_calls(self, tenant: str, session_id: str, run_id: str) -> list[ToolCallRecord]:
        sql = (
            "SELECT record_json FROM tool_calls WHERE tenant=$1 AND session_id=$2 AND run_id=$3"
            " ORDER BY round_index, position"
        )
        return [codec.TOOL_CALL.loads(r) for r in await self._records(sql, tenant, session_id, run_id)]

    async def get_tool_call(self, tenant: str, session_id: str, call_id: str) -> ToolCallRecord | None:
        sql = "SELECT record_json FROM tool_calls WHERE tenant=$1 AND session_id=$2 AND call_id=$3"
        found = await self._records(sql, tenant, session_id, call_id)
        return codec.TOOL_CALL.loads(found[0]) if found else None

    async def list_waiting_calls(self) -> list[ToolCallRecord]:
        sql = (
            "SELECT record_json FROM tool_calls WHERE (status='PENDING' AND kind='HOSTED')"
            " OR status='AWAITING_APPROVAL'"
            ' ORDER BY tenant COLLATE "C", session_id COLLATE "C", round_index, position'
        )
        return [codec.TOOL_CALL.loads(r) for r in await self._records(sql)]

    # ------------------------------------------------------------------ checkpoints
    async def add_checkpoint(
        self, tenant: str, session_id: str, checkpoint: Checkpoint, *, max_count: int, max_bytes: int
    ) -> list[str]:
        marker = writes.AddCheckpoint(checkpoint=checkpoint, max_count=max_count, max_bytes=max_bytes)
        await self._operation(tenant, session_id, marker)
        return marker.dropped

    async def list_checkpoints(
        self, tenant: str, session_id: str, *, before_position: int = 0, limit: int
    ) -> list[CheckpointInfo]:
        return await reads.list_checkpoints(self._p(), tenant, session_id, before_position, limit)

    async def load_checkpoints_down_to(self, tenant: str, session_id: str, checkpoint_id: str) -> list[Checkpoint]:
        return await reads.load_checkpoints_down_to(self._p(), tenant, session_id, checkpoint_id)

    async def delete_checkpoints(self, tenant: str, session_id: str, checkpoint_ids: Sequence[str]) -> None:
        await self._operation(tenant, session_id, writes.DeleteCheckpoints(checkpoint_ids=list(checkpoint_ids)))

    # ------------------------------------------------------------------ hook registrations and idempotency
    async def put_hook_registration(self, tenant: str, session_id: str, plugin_id: str, registration_json: str) -> None:
        await self._operation(
            tenant, session_id, writes.HookRegistration(plugin_id=plugin_id, registration_json=registration_json)
        )

    async def delete_hook_registration(self, tenant: str, session_id: str, plugin_id: str) -> bool:
        marker = writes.HookRegistration(plugin_id=plugin_id, registration_json=None)
        await self._operation(tenant, session_id, marker)
        return marker.changed

    async def list_hook_registrations(self, scope: tuple[str, str] | None = None) -> list[tuple[str, str, str, str]]:
        select = "SELECT tenant, session_id, plugin_id, registration_json FROM hook_registrations"
        if scope is None:
            order = ' ORDER BY tenant COLLATE "C", session_id COLLATE "C", plugin_id COLLATE "C"'
            rows = await self._p().fetch(select + order)
        else:
            scoped = ' WHERE tenant=$1 AND session_id=$2 ORDER BY plugin_id COLLATE "C"'
            rows = await self._p().fetch(select + scoped, *scope)
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    async def get_idempotency(self, tenant: str, rpc: str, request_id: str) -> IdempotencyRecord | None:
        return await reads.get_idempotency(self._p(), tenant, rpc, request_id)

    async def put_idempotency(self, record: IdempotencyRecord) -> None:
        await self.write(WriteBatch(tenant=record.tenant, session_id="", idempotency=record))

    # ------------------------------------------------------------------ leases
    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        return await self.take_lease(tenant, session_id, owner, ttl_seconds=ttl_seconds) is not None

    async def take_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> int | None:
        now_us = to_us(datetime.now(UTC))
        marker = writes.Lease(owner=owner, now_us=now_us, expires_us=now_us + int(ttl_seconds * 1_000_000))
        await self._operation(tenant, session_id, marker)
        return marker.version

    async def renew_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        now_us = to_us(datetime.now(UTC))
        marker = writes.Lease(owner=owner, now_us=now_us, expires_us=now_us + int(ttl_seconds * 1_000_000), renew=True)
        await self._operation(tenant, session_id, marker)
        return marker.version is not None

    async def release_lease(self, tenant: str, session_id: str, owner: str) -> None:
        await self._operation(tenant, session_id, writes.Lease(owner=owner, now_us=0, expires_us=0, release=True))

    async def notify(self, tenant: str, session_id: str, sequence: int) -> None:
        if self._notify:
            wakeup = payloads([f"{events_topic(tenant, session_id)}\t{sequence}"])
            await self._p().execute(NOTIFY_SQL, CHANNEL, wakeup)

    def subscribe(self, topic: str, on_wake: Callable[[], None] | None = None) -> Subscription:
        return self.wakeups.subscribe(topic, on_wake)

    # ------------------------------------------------------------------ relayed commands
    async def put_command(self, command: SessionCommand) -> None:
        await self._operation(command.tenant, command.session_id, commands.PutCommand(command))

    async def claim_commands(self, owner: str) -> list[SessionCommand]:
        marker = commands.ClaimCommands(owner)
        await self._operation("", "", marker)
        return marker.claimed

    async def finish_command(self, tenant: str, command_id: str, result_json: str) -> None:
        await self._operation(tenant, "", commands.FinishCommand(command_id, result_json))

    async def get_command(self, tenant: str, command_id: str) -> SessionCommand | None:
        row = await self._p().fetchrow(commands.COMMAND_SELECT, tenant, command_id)
        return None if row is None else command_from_row(tenant, command_id, tuple(row))

    async def withdraw_command(self, tenant: str, command_id: str) -> bool:
        marker = commands.DeleteCommand(command_id, only_pending=True)
        await self._operation(tenant, "", marker)
        return marker.deleted

    async def delete_command(self, tenant: str, command_id: str) -> None:
        await self._operation(tenant, "", commands.DeleteCommand(command_id, only_pending=False))

    async def purge_commands(self, *, older_than: datetime) -> int:
        marker = commands.PurgeCommands(to_us(older_than))
        await self._operation("", "", marker)
        return marker.purged

    async def lease_holder(self, tenant: str, session_id: str) -> str:
        owner = await self._p().fetchval(commands.LEASE_SELECT, tenant, session_id, now_us())
        return "" if owner is None else str(owner)
