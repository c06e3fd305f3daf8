"""The session RPCs in domain terms: create, get, list, delete, resume, continue, reset, history, and the
session-scoped checkpoint RPCs. The transport (api/) converts protobuf to these arguments and back; forks
are in sessions/fork.py, runs in runs/control.py."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.context import CallContext, SessionView
from general_agent_server.domain.errors import ErrorCode, ServiceError, invalid_argument, quoted, session_not_found
from general_agent_server.domain.events import CompactionReason, RunReason
from general_agent_server.domain.session import (
    HostedToolDefinition,
    SessionConfig,
    SessionIdentity,
    SessionOverrides,
    SessionRecord,
    SessionState,
)
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.domain.validation import (
    check_config,
    check_session_id,
    check_session_key,
    check_size,
    check_token,
)
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.admin import HookAdmin
from general_agent_server.hooks.registrations import HOOK_REGISTRATION, HookRegistrationSpec
from general_agent_server.mcp_servers.admission import check_servers
from general_agent_server.mcp_servers.config import masked
from general_agent_server.model.credentials import CredentialResolver, SessionKeys
from general_agent_server.runs.compaction import (
    DEFAULT_COOLDOWN,
    DEFAULT_THRESHOLD_PCT,
    CompactionOutcome,
    compaction_due,
)
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.idempotency import Idempotency, IdempotencyKeys
from general_agent_server.sessions.paging import decode_token, encode_token, filters_digest, invalid_token
from general_agent_server.sessions.serving import ServingGate
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import ListCursor, SessionExistsError, SessionQuery, SessionStore, WriteBatch
from general_agent_server.tenants.quota import check_session_quota
from general_agent_server.tools.runtime import ToolCatalog
from general_agent_server.workspace.checkpoints.recorder import RestoreResult
from general_agent_server.workspace.checkpoints.service import CheckpointPage, CheckpointService

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SessionServiceDeps:
    settings: CoreSettings
    store: SessionStore
    cache: SessionCache
    keys: SessionKeys
    idempotency: IdempotencyKeys
    credentials: CredentialResolver
    exporter: TranscriptExporter
    hooks: HookAdmin
    catalog: ToolCatalog
    checkpoints: CheckpointService
    gate: ServingGate
    global_hosted_tools: tuple[HostedToolDefinition, ...] = ()
    event_log: EventLog | None = None


@dataclass(frozen=True, slots=True)
class CreatedSession:
    """A session as CreateSession answers it. `registrations` are the hook registrations stored with it, as stored;
    None for an idempotent replay, whose registrations may have changed since (the store has them)."""

    view: SessionView
    registrations: Sequence[HookRegistrationSpec] | None


class SessionService:
    def __init__(self, deps: SessionServiceDeps) -> None:
        self._deps = deps
        self.settings = deps.settings
        self._store = deps.store
        self._cache = deps.cache
        self._keys = deps.idempotency
        self.global_hosted_names = frozenset(t.name for t in deps.global_hosted_tools)

    def view(self, record: SessionRecord) -> SessionView:
        """The session as RPCs answer it: MCP header and env values masked (they are secrets)."""
        path = self._deps.exporter.path_for(record.tenant, record.session_id)
        if record.config.mcp_servers:
            record = replace(record, config=replace(record.config, mcp_servers=masked(record.config.mcp_servers)))
        return SessionView(record=record, transcript_path=str(path))

    def new_record(self, tenant: str, identity: SessionIdentity, config: SessionConfig, **fields: Any) -> SessionRecord:
        now = utcnow()
        return SessionRecord(
            tenant=tenant,
            identity=identity,
            config=config,
            create_time=now,
            update_time=now,
            version=1,
            sequence_reserved=self.settings.sequence_block,
            **fields,
        )

    def check_config(self, config: SessionConfig, field_prefix: str, *, hosted_names: bool = True) -> None:
        check_config(
            config,
            known_profile=self._deps.credentials.has_profile(config.auth_profile_id),
            field_prefix=field_prefix,
            global_hosted_names=self.global_hosted_names if hosted_names else frozenset(),
            limits=self.settings.input_limits,
            memory_served=self.settings.memory_backend != "off",
        )

    async def insert(self, record: SessionRecord, batch: WriteBatch) -> None:
        await check_session_quota(self._store, self.settings.tenants, record.tenant)
        try:
            await self._store.create_session(record, batch=batch)
        except SessionExistsError:
            raise ServiceError(
                ErrorCode.ALREADY_EXISTS,
                "SESSION_ALREADY_EXISTS",
                f"session {quoted(record.session_id)} already exists",
                metadata={"session_id": record.session_id},
            ) from None

    # ------------------------------------------------------------------ create
    async def create_session(
        self,
        ctx: CallContext,
        *,
        identity: SessionIdentity,
        config: SessionConfig,
        api_key: str = "",
        idem: Idempotency | None = None,
        hook_registrations: Sequence[HookRegistrationSpec] = (),
    ) -> CreatedSession:
        self._deps.gate.check()
        replay = await self._keys.replay(ctx.tenant, "CreateSession", idem)
        if replay is not None:
            return CreatedSession(await self.get_session(ctx, str(replay["session_id"])), None)
        if identity.session_id:
            check_session_id(identity.session_id, "session.identity.session_id")
        check_session_key(identity.session_key, "session.identity.session_key", self.settings.input_limits)
        check_token("api_key", api_key)
        self.check_config(config, "session")
        await check_servers(
            ctx,
            config.mcp_servers,
            "session.mcp_servers",
            stdio_allow=self.settings.mcp_stdio_allow,
            ssrf_allow_hosts=self.settings.ssrf_allow_hosts,
        )
        hooks = self._deps.hooks
        await hooks.check_session_registrations(ctx, hook_registrations)
        session_id = identity.session_id or str(uuid.uuid4())
        if not config.model_ref:
            config = replace(config, model_ref=self.settings.default_model)
        record = self.new_record(ctx.tenant, replace(identity, session_id=session_id), config)
        # The session's registrations are stored in the same transaction as the session.
        registrations = [hooks.for_store(ctx.tenant, replace(r, session_id=session_id)) for r in hook_registrations]
        batch = WriteBatch(
            tenant=ctx.tenant,
            session_id=session_id,
            idempotency=self._keys.record(ctx.tenant, "CreateSession", idem, {"session_id": session_id}),
            hook_registrations=[(s.plugin_id, HOOK_REGISTRATION.dumps(s)) for _, s in registrations],
        )
        await self.insert(record, batch)
        for live, _ in registrations:
            hooks.activate(live)
        await self._cache.adopt(self._cache.new_session(record, []))
        self._deps.keys.set(ctx.tenant, session_id, api_key)
        logger.info("session created", extra={"category": "system", "tenant": ctx.tenant, "session_id": session_id})
        return CreatedSession(self.view(record), [stored for _, stored in registrations])

    # ------------------------------------------------------------------ read
    async def get_session(self, ctx: CallContext, session_id: str) -> SessionView:
        check_session_id(session_id)
        loaded = self._cache.peek(ctx.tenant, session_id)
        # Another replica may have changed a copy whose run does not execute here: the store has the truth.
        local = loaded is not None and loaded.owns_run
        record = (
            loaded.record if loaded is not None and local else await self._store.get_session(ctx.tenant, session_id)
        )
        if record is None:
            raise session_not_found(session_id)
        return self.view(record)

    async def list_sessions(
        self, ctx: CallContext, query: SessionQuery, *, page_size: int, page_token: str
    ) -> tuple[list[SessionView], str]:
        if page_size < 0:
            raise invalid_argument("page_size", "must not be negative")
        limit = min(page_size or 50, 1000)
        digest = filters_digest(
            {
                "prefix": query.session_key_prefix,
                "mode": query.mode.value if query.mode else None,
                "labels": dict(query.labels),
                "parent": query.parent_session_id,
                "children": query.include_children,
            }
        )
        after: ListCursor | None = None
        if page_token:
            position = decode_token(page_token, digest)
            try:
                after = ListCursor(
                    update_time=utcnow().fromisoformat(str(position["u"])), session_id=str(position["s"])
                )
            except (KeyError, ValueError):
                raise invalid_token("malformed") from None
        records = await self._store.list_sessions(ctx.tenant, query, after=after, limit=limit + 1)
        next_token = ""
        if len(records) > limit:
            records = records[:limit]
            last = records[-1]
            next_token = encode_token({"u": last.update_time.isoformat(), "s": last.session_id}, digest)
        return [self.view(r) for r in records], next_token

    async def get_history(
        self, ctx: CallContext, session_id: str, *, page_size: int, page_token: str
    ) -> tuple[list[TranscriptEntry], str]:
        check_session_id(session_id)
        if page_size < 0:
            raise invalid_argument("page_size", "must not be negative")
        if (
            self._cache.peek(ctx.tenant, session_id) is None
            and await self._store.get_session(ctx.tenant, session_id) is None
        ):
            raise session_not_found(session_id)
        limit = min(page_size or 100, 1000)
        digest = filters_digest({"session": session_id})
        after = 0
        if page_token:
            after = decode_token(page_token, digest).get("e", 0)
            if not isinstance(after, int) or after < 0:
                raise invalid_token("malformed")
        await self._store.flush()
        entries = await self._store.read_transcript(ctx.tenant, session_id, after_entry_id=after, limit=limit + 1)
        more = len(entries) > limit
        # Pages are also capped in bytes so a history of large images cannot exceed message limits.
        budget = self.settings.max_history_page_bytes
        kept: list[TranscriptEntry] = []
        for entry in entries[:limit]:
            size = _approx_size(entry)
            if kept and size > budget:
                more = True
                break
            budget -= size
            kept.append(entry)
        next_token = encode_token({"e": kept[-1].entry_id}, digest) if more and kept else ""
        return kept, next_token

    # ------------------------------------------------------------------ change
    async def resume_session(
        self, ctx: CallContext, session_id: str, overrides: SessionOverrides, idem: Idempotency | None = None
    ) -> SessionView:
        check_session_id(session_id)
        return await self._apply_overrides(ctx, session_id, overrides, identity=None, rpc="ResumeSession", idem=idem)

    async def continue_session(
        self, ctx: CallContext, identity: SessionIdentity, overrides: SessionOverrides, idem: Idempotency | None = None
    ) -> SessionView:
        check_session_id(identity.session_id, "identity.session_id")
        check_session_key(identity.session_key, "identity.session_key", self.settings.input_limits)
        return await self._apply_overrides(
            ctx, identity.session_id, overrides, identity=identity, rpc="ContinueSession", idem=idem
        )

    async def _apply_overrides(
        self,
        ctx: CallContext,
        session_id: str,
        overrides: SessionOverrides,
        *,
        identity: SessionIdentity | None,
        rpc: str,
        idem: Idempotency | None,
    ) -> SessionView:
        check_token("overrides.api_key", overrides.api_key)

        def changes(record: SessionRecord) -> dict[str, object]:
            config = overrides.apply(record.config)
            self.check_config(config, "overrides", hosted_names=False)
            changed: dict[str, object] = {}
            if config != record.config:
                changed["config"] = config
            if overrides.approval_policy is not None and record.approved_tools:
                changed["approved_tools"] = ()  # a new policy starts over: nothing approved for the session
            if identity is not None and identity != record.identity:
                if identity.mode != record.identity.mode and record.state is not SessionState.IDLE:
                    raise ServiceError(
                        ErrorCode.FAILED_PRECONDITION,
                        "IDENTITY_MISMATCH",
                        f"cannot change the mode of session {quoted(session_id)} while a run is "
                        f"{record.state.value.lower()}",
                        metadata={"state": record.state.value},
                    )
                changed["identity"] = identity
            return changed

        async with self._cache.use(ctx.tenant, session_id) as session:
            keyed = self._keys.keyed(ctx.tenant, rpc, idem)
            record = await session.change(changes, keyed, {"session_id": session_id})
        self._deps.keys.set(ctx.tenant, session_id, overrides.api_key)
        return self.view(record)

    async def reset_session(
        self, ctx: CallContext, session_id: str, reason: str, idem: Idempotency | None = None
    ) -> SessionView:
        check_session_id(session_id)
        check_token("reason", reason)
        async with self._cache.use(ctx.tenant, session_id) as session:
            record = await session.reset(reason or "manual", self._keys.keyed(ctx.tenant, "ResetSession", idem))
        return self.view(record)

    # ------------------------------------------------------------------ delete
    async def delete_session(self, ctx: CallContext, session_id: str, idem: Idempotency | None = None) -> bool:
        check_session_id(session_id)
        replay = await self._keys.replay(ctx.tenant, "DeleteSession", idem)
        if replay is not None:
            return bool(replay["deleted"])
        deleted = await self._delete(ctx.tenant, session_id)
        await self._keys.remember(ctx.tenant, session_id, "DeleteSession", idem, {"deleted": deleted})
        return deleted

    async def _delete(self, tenant: str, session_id: str) -> bool:
        """Stops any run (SESSION_DELETED), kills its processes, removes state, transcript, checkpoints, events and
        registrations, fires session_end. Subagent children go with their parent (they are never listed alone)."""
        children = await self._store.list_sessions(
            tenant, SessionQuery(parent_session_id=session_id), after=None, limit=10_000
        )
        for child in children:
            await self._delete(tenant, child.session_id)
        loaded = self._cache.peek(tenant, session_id)
        if loaded is not None:
            await loaded.close(RunReason.SESSION_DELETED)
        else:
            await self._session_end_unloaded(tenant, session_id)
        deleted = await self._store.delete_session(tenant, session_id)
        await self._deps.catalog.session_closed(tenant, session_id)
        self._cache.forget(tenant, session_id)
        self._deps.hooks.forget_session(tenant, session_id)
        await self._deps.exporter.delete(tenant, session_id)
        if self._deps.event_log is not None:
            await self._deps.event_log.delete(tenant, session_id)
        if deleted:
            logger.info("session deleted", extra={"category": "system", "tenant": tenant, "session_id": session_id})
        return deleted

    async def _session_end_unloaded(self, tenant: str, session_id: str) -> None:
        """session_end for a session not in memory, read only when someone listens (a delete of an unloaded
        session costs no extra read otherwise)."""
        runner = self._deps.hooks.runner
        if not runner.registry.has_handlers(frozenset({"session_end"}), tenant=tenant, session_id=session_id):
            return
        record = await self._store.get_session(tenant, session_id)
        if record is None:
            return
        identity = {"sessionId": session_id, "sessionKey": record.identity.session_key}
        entries = await self._store.count_transcript(tenant, session_id)
        event = {**identity, "messageCount": entries, "durationMs": 0}
        runner.fire("session_end", event, identity, tenant=tenant, session_id=session_id)

    # ------------------------------------------------------------------ compaction
    async def compact(
        self, ctx: CallContext, session_id: str, *, instructions: str = "", idem: Idempotency | None = None
    ) -> CompactionOutcome:
        """RequestCompaction: the older history summarised now (a no-op when nothing is older than the kept
        turns); SESSION_BUSY while a run is active or suspended."""
        check_session_id(session_id)
        check_size(
            "instructions", len(instructions.encode()), "bytes", self.settings.input_limits, "max_system_prompt_bytes"
        )
        async with self._cache.use(ctx.tenant, session_id) as session:
            keyed = self._keys.keyed(ctx.tenant, "RequestCompaction", idem)
            return await session.compact(CompactionReason.MANUAL_REQUEST, keyed, instructions=instructions)

    async def maybe_compact(
        self,
        ctx: CallContext,
        session_id: str,
        *,
        threshold_pct: int,
        cooldown_seconds: float | None,
        idem: Idempotency | None = None,
    ) -> CompactionOutcome:
        """MaybeCompactByTokens: compacts when the latest usage snapshot is at or over the threshold (default 85%)
        and the last compaction is at least the cooldown (default 60 s) ago."""
        check_session_id(session_id)
        if not 0 <= threshold_pct <= 100:
            raise invalid_argument("threshold_pct", "must be between 0 and 100")
        if cooldown_seconds is not None and cooldown_seconds < 0:
            raise invalid_argument("cooldown", "must not be negative")
        due = compaction_due(
            threshold_pct or DEFAULT_THRESHOLD_PCT, DEFAULT_COOLDOWN if cooldown_seconds is None else cooldown_seconds
        )
        async with self._cache.use(ctx.tenant, session_id) as session:
            keyed = self._keys.keyed(ctx.tenant, "MaybeCompactByTokens", idem)
            return await session.compact(CompactionReason.TOKEN_THRESHOLD, keyed, due=due)

    # ------------------------------------------------------------------ checkpoints
    async def list_checkpoints(
        self, ctx: CallContext, session_id: str, *, page_size: int, page_token: str
    ) -> CheckpointPage:
        return await self._deps.checkpoints.list_checkpoints(
            ctx.tenant, session_id, page_size=page_size, page_token=page_token
        )

    async def restore_checkpoint(
        self, ctx: CallContext, session_id: str, checkpoint_id: str, idem: Idempotency | None = None
    ) -> RestoreResult:
        """Rewinds the workspace to before the checkpoint; not while a run could be changing files."""
        check_session_id(session_id)
        replay = await self._keys.replay(ctx.tenant, "RestoreCheckpoint", idem)
        if replay is not None:
            return RestoreResult(
                restored_paths=tuple(replay["restored_paths"]), checkpoints_undone=int(replay["checkpoints_undone"])
            )
        async with self._cache.use(ctx.tenant, session_id) as session:
            result = await session.when_idle(
                lambda: self._deps.checkpoints.restore_checkpoint(
                    ctx.tenant, session_id, checkpoint_id, session.workspace
                )
            )
        answer = {"restored_paths": list(result.restored_paths), "checkpoints_undone": result.checkpoints_undone}
        await self._keys.remember(ctx.tenant, session_id, "RestoreCheckpoint", idem, answer)
        return result


def _approx_size(entry: TranscriptEntry) -> int:
    body: Any = entry.body
    size = 64
    for part in getattr(body, "content", ()) or getattr(body, "output", ()):
        size += len(getattr(part, "data", b"")) * 4 // 3 + len(getattr(part, "text", ""))
    for name in ("text", "prompt", "summary", "input_json", "details_json"):
        size += len(getattr(body, name, "") or "")
    return size
