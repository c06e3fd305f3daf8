"""The application service: one method per RPC, in domain terms. The transport (api/) converts
protobuf to these arguments and back, and nothing else."""

from __future__ import annotations

import asyncio
import enum
import logging
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from general_agent_server.domain import codec
from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import (
    ErrorCode,
    ServiceError,
    invalid_argument,
    not_implemented,
    quoted,
    session_not_found,
)
from general_agent_server.domain.events import RunReason
from general_agent_server.domain.records import RunStatus
from general_agent_server.domain.session import (
    DEFAULT_TENANT,
    ForkOrigin,
    HostedToolDefinition,
    SessionConfig,
    SessionIdentity,
    SessionOverrides,
    SessionRecord,
    SessionState,
)
from general_agent_server.domain.transcript import SessionResetEntry, TranscriptEntry
from general_agent_server.domain.validation import (
    check_config,
    check_sequence,
    check_session_id,
    check_session_key,
    check_size,
    check_token,
)
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.plugins import LoadedPlugins, load_plugins
from general_agent_server.hooks.registrations import (
    HookDialer,
    HookRegistrationSpec,
    check_registration,
    handlers_for,
)
from general_agent_server.hooks.runner import HOOK_NAMES, HookFailedError, HookOutcome, HookRegistry, HookRunner
from general_agent_server.model.credentials import CredentialResolver
from general_agent_server.model.port import Credential, ModelClient
from general_agent_server.runs.control import TurnOps
from general_agent_server.runs.recovery import recover_interrupted_runs
from general_agent_server.security.redaction import register_secret
from general_agent_server.security.ssrf import SsrfBlocked, check_host
from general_agent_server.sessions.cache import ActorRegistry
from general_agent_server.sessions.idempotency import Idempotency, IdempotencyKeys
from general_agent_server.sessions.live import ActorDeps, SessionActor
from general_agent_server.sessions.paging import decode_token, encode_token, filters_digest, invalid_token
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import (
    ListCursor,
    SessionExistsError,
    SessionQuery,
    SessionStore,
    WriteBatch,
)
from general_agent_server.tools.runtime import ToolCatalog
from general_agent_server.tools.subagents import SubagentTool
from general_agent_server.workspace.checkpoints.recorder import CheckpointBounds, CheckpointRecorder, RestoreResult
from general_agent_server.workspace.checkpoints.service import CheckpointPage, CheckpointService

logger = logging.getLogger(__name__)


class CallerRole(enum.StrEnum):
    """What a caller may make the server do. An `admin` is the operator: its hook targets (and MCP URLs) may be
    loopback or private hosts, its own sidecars. A `tenant` is a customer of a shared server: what it registers
    passes the SSRF guard. Without authentication every caller is the operator, since the server then listens on
    loopback (or behind --insecure-listen, on the operator's say-so)."""

    ADMIN = "admin"
    TENANT = "tenant"


@dataclass(frozen=True, kw_only=True, slots=True)
class CallContext:
    """Who is calling (the tenant scopes every id, the role decides what is trusted) and the correlation id for
    logs."""

    tenant: str = DEFAULT_TENANT
    role: CallerRole = CallerRole.ADMIN
    request_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionView:
    record: SessionRecord
    transcript_path: str


class AgentCore:
    """See module docstring."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        store: SessionStore,
        model: ModelClient,
        credentials: CredentialResolver,
        exporter: TranscriptExporter,
        catalog: ToolCatalog,
        global_hosted_tools: tuple[HostedToolDefinition, ...] = (),
        event_log: EventLog | None = None,
        hook_dialer: HookDialer | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.idempotency = IdempotencyKeys(store, ttl_seconds=settings.idempotency_ttl_seconds)
        self.model = model
        self.credentials = credentials
        self.exporter = exporter
        # The subagents tool drives child sessions through this core, so it joins the catalog here.
        self.catalog = replace(catalog, builtins={**catalog.builtins, "subagents": SubagentTool(self)})
        catalog = self.catalog
        self.global_hosted_tools = global_hosted_tools
        self.hooks = HookRunner(HookRegistry())
        recorder = CheckpointRecorder(
            store,
            CheckpointBounds(max_count=settings.checkpoint_max_count, max_bytes=settings.checkpoint_max_bytes),
        )
        self.checkpoints = CheckpointService(store, recorder)
        self.registry = ActorRegistry(
            ActorDeps(
                store=store,
                model=model,
                settings=settings,
                exporter=exporter,
                catalog=catalog,
                credentials=self.resolve_credential,
                global_hosted_tools=global_hosted_tools,
                event_log=event_log,
                hooks=self.hooks,
                checkpoints=recorder,
            )
        )
        self.event_log = event_log
        self.hook_dialer = hook_dialer
        # Registrations as given (with any mutual-TLS key, which the store never sees), by (tenant, scope, plugin).
        self._live_registrations: dict[tuple[str, str, str], HookRegistrationSpec] = {}
        self.plugins = LoadedPlugins(ids=())
        self.global_hosted_names = frozenset(t.name for t in global_hosted_tools)
        self.turns = TurnOps(self)
        self._shutting_down = False

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Start-up recovery (spec 8.1): runs interrupted by a crash are marked FAILED/INTERRUPTED."""
        self.exporter.start()
        self.registry.start()
        if self.event_log is not None:
            self.event_log.start()
        recovered = await recover_interrupted_runs(self.store, sequence_block=self.settings.sequence_block)
        if recovered:
            logger.info("marked %d interrupted run(s) as FAILED/INTERRUPTED", recovered, extra={"category": "system"})
        self.plugins = load_plugins(
            self.hooks.registry, mode=self.settings.plugin_mode, enabled_ids=self.settings.enabled_plugin_ids
        )
        await self._load_hook_registrations()
        # Suspended sessions come back into memory so their hosted deadlines are armed (expired ones fire).
        for call in await self.store.list_pending_hosted_calls():
            async with self.registry.use(call.tenant, call.session_id):
                pass

    async def shutdown(self, grace_seconds: float) -> None:
        """New turns are refused; running runs get the grace, then stop as FAILED/INTERRUPTED; watch
        streams end UNAVAILABLE so clients reconnect with after_sequence."""
        self._shutting_down = True
        # Only executing runs get the grace; suspended runs stay suspended (they have no task).
        tasks = [a.run.task for a in self.registry.active() if a.run is not None and a.run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_seconds)
            for actor in self.registry.active():
                actor.cancel_run(RunReason.INTERRUPTED)
            # A run task ends when its run finishes or suspends; either way nothing is left running.
            await asyncio.gather(*tasks, return_exceptions=True)
        error = ServiceError(
            ErrorCode.UNAVAILABLE,
            "SHUTTING_DOWN",
            "the server is shutting down; reconnect with after_sequence",
            retry_after_seconds=1.0,
        )
        for actor in self.registry.active():
            actor.close_subscribers(error)
        # session_end for the sessions of this process, and gateway_stop, are awaited within their timeouts.
        await asyncio.gather(*(a.end_session_hooks(wait=True) for a in self.registry.loaded()))
        await self._fire_gateway("gateway_stop", {"reason": "shutdown"})
        await asyncio.gather(*self.hooks.background, return_exceptions=True)
        # Background processes of tools (exec) die with the server.
        await self.catalog.aclose()
        await self.registry.close()  # leases released: another replica may take these sessions at once
        await self.exporter.close()
        if self.hook_dialer is not None:
            await self.hook_dialer.close()
        if self.event_log is not None:
            await self.event_log.close()

    # ------------------------------------------------------------------ hooks
    def gateway_started(self, port: int) -> None:
        """The server listens: gateway_start with the bound port (spec 7), not awaited."""
        self.hooks.fire("gateway_start", {"port": port}, {"port": port})

    async def _fire_gateway(self, hook: str, event: dict[str, Any]) -> None:
        try:
            await self.hooks.run(hook, event, {"port": event.get("port", 0)} if "port" in event else {})
        except Exception:
            logger.exception("hook %s failed", hook, extra={"category": "system"})

    async def _load_hook_registrations(self) -> None:
        """Registrations persist across restarts (spec 7)."""
        if self.hook_dialer is None:
            return
        for _tenant, _session, _plugin, document in await self.store.list_hook_registrations():
            spec = codec.HOOK_REGISTRATION.loads(document)
            self.hooks.registry.register(
                handlers_for(spec, self.hook_dialer, max_payload_bytes=self.settings.hook_max_payload_bytes)
            )

    def _dialer(self) -> HookDialer:
        if self.hook_dialer is None:
            raise not_implemented("hooks", "remote hook registrations")
        return self.hook_dialer

    async def register_hooks(self, ctx: CallContext, spec: HookRegistrationSpec) -> HookRegistrationSpec:
        limits = self.settings.input_limits
        check_registration(spec, limits=limits)
        if spec.session_id:
            await self.get_session(ctx, spec.session_id)
        await self._check_hook_target(ctx, spec, "registration.target.address")
        # Registrations live in memory for as long as the server runs: their number per scope is bounded.
        scope = await self.session_registrations(ctx.tenant, spec.session_id)
        count = 1 + sum(1 for s in scope if s.plugin_id != spec.plugin_id)
        check_size("registration", count, "registrations in its scope", limits, "max_hook_registrations")
        return await self._add_registration(ctx.tenant, spec)

    async def _check_hook_target(self, ctx: CallContext, spec: HookRegistrationSpec, field: str) -> None:
        """A tenant's hook targets pass the SSRF guard unless allow-listed; the operator's are trusted."""
        if ctx.role is not CallerRole.TENANT:
            return
        host = spec.target.rpartition(":")[0].strip("[]")
        try:
            await check_host(host, self.settings.ssrf_allow_hosts)
        except SsrfBlocked as blocked:
            raise invalid_argument(field, f"hook target refused: {blocked.reason}", reason="INVALID_HOOK") from None

    @staticmethod
    def _registration_to_store(
        tenant: str, spec: HookRegistrationSpec
    ) -> tuple[HookRegistrationSpec, HookRegistrationSpec]:
        """The registration as it lives in memory, and as it is stored: the mutual-TLS client key is a
        secret, kept in memory and never stored (and redacted wherever it could surface)."""
        live = replace(spec, tenant=tenant, create_time=spec.create_time or utcnow())
        if live.tls is not None:
            register_secret(live.tls.client_key_pem)
        stored = live if live.tls is None else replace(live, tls=replace(live.tls, client_key_pem=""))
        return live, stored

    async def _add_registration(
        self, tenant: str, spec: HookRegistrationSpec, *, already_stored: bool = False
    ) -> HookRegistrationSpec:
        dialer = self._dialer()
        live, stored = self._registration_to_store(tenant, spec)
        if not already_stored:
            await self.store.put_hook_registration(
                tenant, stored.session_id, stored.plugin_id, codec.HOOK_REGISTRATION.dumps(stored)
            )
        self.hooks.registry.register(handlers_for(live, dialer, max_payload_bytes=self.settings.hook_max_payload_bytes))
        self._live_registrations[(tenant, live.session_id, live.plugin_id)] = live
        logger.info(
            "hooks registered by plugin %s",
            stored.plugin_id,
            extra={"category": "system", "tenant": tenant, "session_id": stored.session_id},
        )
        return stored

    async def session_registrations(self, tenant: str, session_id: str) -> list[HookRegistrationSpec]:
        return [
            codec.HOOK_REGISTRATION.loads(document)
            for owner, scope, _plugin, document in await self.store.list_hook_registrations()
            if owner == tenant and scope == session_id
        ]

    async def unregister_hooks(self, ctx: CallContext, plugin_id: str, session_id: str = "") -> bool:
        removed = await self.store.delete_hook_registration(ctx.tenant, session_id, plugin_id)
        self.hooks.registry.unregister(plugin_id, tenant=ctx.tenant, scope=session_id)
        self._live_registrations.pop((ctx.tenant, session_id, plugin_id), None)
        return removed

    async def list_hook_registrations(self, ctx: CallContext, session_id: str = "") -> list[HookRegistrationSpec]:
        return await self.session_registrations(ctx.tenant, session_id)

    async def emit_hook(
        self, ctx: CallContext, hook: str, event: dict[str, Any], context: dict[str, Any], session_id: str = ""
    ) -> HookOutcome:
        """Runs any hook with the runner's merge rules (spec 7, EmitHook)."""
        if hook not in HOOK_NAMES:
            raise invalid_argument("hook_name", f"unknown hook {quoted(hook)}", reason="INVALID_HOOK")
        if session_id:
            await self.get_session(ctx, session_id)
        try:
            return await self.hooks.run(hook, event, context, tenant=ctx.tenant, session_id=session_id)
        except HookFailedError as exc:
            raise ServiceError(ErrorCode.FAILED_PRECONDITION, "HOOK_FAILED", str(exc)) from None

    def check_serving(self) -> None:
        if self._shutting_down:
            raise ServiceError(
                ErrorCode.UNAVAILABLE, "SHUTTING_DOWN", "the server is shutting down", retry_after_seconds=1.0
            )

    def view(self, record: SessionRecord) -> SessionView:
        return SessionView(record=record, transcript_path=str(self.exporter.path_for(record.tenant, record.session_id)))

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self,
        ctx: CallContext,
        *,
        identity: SessionIdentity,
        config: SessionConfig,
        api_key: str = "",
        idem: Idempotency | None = None,
        hook_registrations: Sequence[HookRegistrationSpec] = (),
    ) -> SessionView:
        self.check_serving()
        replay = await self.idempotency.replay(ctx.tenant, "CreateSession", idem)
        if replay is not None:
            return await self.get_session(ctx, str(replay["session_id"]))
        if identity.session_id:
            check_session_id(identity.session_id, "session.identity.session_id")
        limits = self.settings.input_limits
        check_session_key(identity.session_key, "session.identity.session_key", limits)
        check_token("api_key", api_key)
        check_config(
            config,
            known_profile=self.credentials.has_profile(config.auth_profile_id),
            global_hosted_names=self.global_hosted_names,
            limits=limits,
        )
        if hook_registrations:
            self._dialer()
        check_size(
            "session.hook_registrations", len(hook_registrations), "registrations", limits, "max_hook_registrations"
        )
        seen_plugins: set[str] = set()
        for index, registration in enumerate(hook_registrations):
            where = f"session.hook_registrations[{index}]"
            check_registration(registration, where, limits)
            if registration.plugin_id in seen_plugins:
                raise invalid_argument(f"{where}.plugin_id", f"plugin {quoted(registration.plugin_id)} listed twice")
            seen_plugins.add(registration.plugin_id)
            await self._check_hook_target(ctx, registration, f"{where}.target.address")
        session_id = identity.session_id or str(uuid.uuid4())
        if not config.model_ref:
            config = replace(config, model_ref=self.settings.default_model_ref)
        now = utcnow()
        record = SessionRecord(
            tenant=ctx.tenant,
            identity=replace(identity, session_id=session_id),
            config=config,
            create_time=now,
            update_time=now,
            version=1,
            sequence_reserved=self.settings.sequence_block,
        )
        # The session's registrations are stored in the same transaction as the session.
        registrations = [
            self._registration_to_store(ctx.tenant, replace(r, session_id=session_id)) for r in hook_registrations
        ]
        batch = WriteBatch(
            tenant=ctx.tenant,
            session_id=session_id,
            idempotency=self.idempotency.record(ctx.tenant, "CreateSession", idem, {"session_id": session_id}),
            hook_registrations=[(s.plugin_id, codec.HOOK_REGISTRATION.dumps(s)) for _, s in registrations],
        )
        await self._insert_session(record, batch)
        for live, _ in registrations:
            await self._add_registration(ctx.tenant, live, already_stored=True)
        await self.registry.adopt(self.registry.new_actor(record, []))
        if api_key:
            self.registry.memory_keys[(ctx.tenant, session_id)] = register_secret(api_key)
        logger.info("session created", extra={"category": "system", "tenant": ctx.tenant, "session_id": session_id})
        return self.view(record)

    async def create_child_session(
        self,
        tenant: str,
        *,
        parent_session_id: str,
        identity: SessionIdentity,
        config: SessionConfig,
        agent_id: str,
    ) -> None:
        """A subagent child: stored with its parent, the parent's credential carried over."""
        now = utcnow()
        record = SessionRecord(
            tenant=tenant,
            identity=identity,
            config=config,
            create_time=now,
            update_time=now,
            version=1,
            sequence_reserved=self.settings.sequence_block,
            parent_session_id=parent_session_id,
        )
        await self._insert_session(record, WriteBatch(tenant=tenant, session_id=identity.session_id))
        actor = self.registry.new_actor(record, [])
        actor.hooks.agent_id = agent_id
        await self.registry.adopt(actor)
        parent_key = self.registry.memory_keys.get((tenant, parent_session_id))
        if parent_key:
            self.registry.memory_keys[(tenant, identity.session_id)] = parent_key

    async def stop_child(self, tenant: str, session_id: str) -> None:
        """The parent's run was stopped or cancelled: the child's run ends too, and is waited for."""
        actor = self.registry.peek(tenant, session_id)
        if actor is None:
            return
        async with actor.lock:
            await actor.stop_run(RunReason.CANCELLED)

    async def _insert_session(self, record: SessionRecord, batch: WriteBatch) -> None:
        try:
            await self.store.create_session(record, batch=batch)
        except SessionExistsError:
            raise ServiceError(
                ErrorCode.ALREADY_EXISTS,
                "SESSION_ALREADY_EXISTS",
                f"session {quoted(record.session_id)} already exists",
                metadata={"session_id": record.session_id},
            ) from None

    async def get_session(self, ctx: CallContext, session_id: str) -> SessionView:
        check_session_id(session_id)
        actor = self.registry.peek(ctx.tenant, session_id)
        record = actor.record if actor is not None else await self.store.get_session(ctx.tenant, session_id)
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
        records = await self.store.list_sessions(ctx.tenant, query, after=after, limit=limit + 1)
        next_token = ""
        if len(records) > limit:
            records = records[:limit]
            last = records[-1]
            next_token = encode_token({"u": last.update_time.isoformat(), "s": last.session_id}, digest)
        return [self.view(r) for r in records], next_token

    async def delete_session(self, ctx: CallContext, session_id: str, idem: Idempotency | None = None) -> bool:
        check_session_id(session_id)
        replay = await self.idempotency.replay(ctx.tenant, "DeleteSession", idem)
        if replay is not None:
            return bool(replay["deleted"])
        deleted = await self._delete_session(ctx, session_id)
        await self.idempotency.remember(ctx.tenant, session_id, "DeleteSession", idem, {"deleted": deleted})
        return deleted

    async def _delete_session(self, ctx: CallContext, session_id: str) -> bool:
        # Subagent children go with their parent (they are never listed on their own).
        children = await self.store.list_sessions(
            ctx.tenant, SessionQuery(parent_session_id=session_id), after=None, limit=10_000
        )
        for child in children:
            await self._delete_session(ctx, child.session_id)
        actor = self.registry.peek(ctx.tenant, session_id)
        if actor is not None:
            async with actor.lock:
                await actor.stop_run(RunReason.SESSION_DELETED)
                actor.disarm_deadlines()
                actor.close_subscribers()
            await actor.end_session_hooks(wait=False, deleted=True)
        elif (
            self.hooks.registry.has_handlers(frozenset({"session_end"}), tenant=ctx.tenant, session_id=session_id)
            and (record := await self.store.get_session(ctx.tenant, session_id)) is not None
        ):
            # Read only when someone listens: a delete of an unloaded session costs no extra read otherwise.
            identity = {"sessionId": session_id, "sessionKey": record.identity.session_key}
            entries = await self.store.count_transcript(ctx.tenant, session_id)
            event = {**identity, "messageCount": entries, "durationMs": 0}
            self.hooks.fire("session_end", event, identity, tenant=ctx.tenant, session_id=session_id)
        deleted = await self.store.delete_session(ctx.tenant, session_id)
        await self.catalog.session_closed(ctx.tenant, session_id)
        self.registry.forget(ctx.tenant, session_id)
        self.hooks.registry.unregister_scope(tenant=ctx.tenant, scope=session_id)
        for key in [k for k in self._live_registrations if k[:2] == (ctx.tenant, session_id)]:
            del self._live_registrations[key]
        await self.exporter.delete(ctx.tenant, session_id)
        if self.event_log is not None:
            await self.event_log.delete(ctx.tenant, session_id)
        if deleted:
            logger.info(
                "session deleted",
                extra={"category": "system", "tenant": ctx.tenant, "session_id": session_id},
            )
        return deleted

    async def fork_session(
        self,
        ctx: CallContext,
        source_session_id: str,
        *,
        identity: SessionIdentity,
        overrides: SessionOverrides,
        at_sequence: int | None,
        copy_workspace: bool,
        inherit_mode: bool = True,
        idem: Idempotency | None = None,
    ) -> SessionView:
        """A new session with the source's history and transcript up to the last completed run at or before
        `at_sequence` (spec 4): a running or suspended tail is never copied, so no tool_use is cut from its
        result."""
        check_session_id(source_session_id, "source_session_id")
        if identity.session_id:
            check_session_id(identity.session_id, "identity.session_id")
        check_session_key(identity.session_key, "identity.session_key", self.settings.input_limits)
        check_sequence(at_sequence, "at_sequence")
        check_token("overrides.api_key", overrides.api_key)
        self.check_serving()
        replay = await self.idempotency.replay(ctx.tenant, "ForkSession", idem)
        if replay is not None:
            return await self.get_session(ctx, str(replay["session_id"]))
        async with self.registry.use(ctx.tenant, source_session_id) as source, source.lock:
            src = source.record
            cutoff = src.last_sequence if at_sequence is None else at_sequence
            runs = await self.store.list_runs(ctx.tenant, source_session_id)
            finished = [r for r in runs if r.status is RunStatus.FINISHED and r.last_sequence <= cutoff]
            kept_runs = {r.run_id for r in finished}
            cut = finished[-1].last_sequence if finished else 0
            await self.store.flush()
            entries = await self.store.read_transcript(ctx.tenant, source_session_id, after_entry_id=0, limit=1 << 30)
            resets = [e.sequence for e in entries if isinstance(e.body, SessionResetEntry)]
            if any(r > cutoff for r in resets) and any(r.last_sequence < max(resets) for r in finished):
                # A later reset cleared the history of the runs before it: that state cannot be rebuilt.
                raise invalid_argument(
                    "at_sequence",
                    f"{cutoff} is before the last reset of session {quoted(source_session_id)} (sequence "
                    f"{max(resets)}), which cleared that history; fork at or after the reset",
                )
            history = [m for m in source.history if m.run_id in kept_runs]
            source_workspace = source.workspace
        config = overrides.apply(src.config)
        check_config(
            config,
            known_profile=self.credentials.has_profile(config.auth_profile_id),
            field_prefix="overrides",
            global_hosted_names=self.global_hosted_names,
            limits=self.settings.input_limits,
        )
        session_id = identity.session_id or str(uuid.uuid4())
        now = utcnow()
        record = SessionRecord(
            tenant=ctx.tenant,
            identity=SessionIdentity(
                mode=src.identity.mode if inherit_mode else identity.mode,
                session_id=session_id,
                session_key=identity.session_key or src.identity.session_key,
            ),
            config=config,
            create_time=now,
            update_time=now,
            forked_from=ForkOrigin(session_id=source_session_id, at_sequence=cut),
            # The source's context usage describes its latest state: only a fork of that state inherits it.
            usage_snapshot=src.usage_snapshot if at_sequence is None and history else None,
            history_message_count=len(history),
            version=1,
            sequence_reserved=self.settings.sequence_block,
        )
        # The fork's log starts at 1: copied transcript entries keep their content, not the source's numbers.
        # Session-level entries (a reset) up to the fork point come along, so the copy reads like the source.
        transcript = [
            replace(e, sequence=0, entry_id=0)
            for e in entries
            if (e.run_id in kept_runs and e.sequence <= cut) or (not e.run_id and e.sequence <= cutoff)
        ]
        # The source's own hook registrations come along, in the fork's transaction.
        registrations = [
            self._registration_to_store(
                ctx.tenant,
                replace(
                    self._live_registrations.get((ctx.tenant, source_session_id, r.plugin_id), r),
                    session_id=session_id,
                    create_time=None,
                ),
            )
            for r in await self.session_registrations(ctx.tenant, source_session_id)
        ]
        batch = WriteBatch(
            tenant=ctx.tenant,
            session_id=session_id,
            history=history,
            transcript=transcript,
            idempotency=self.idempotency.record(ctx.tenant, "ForkSession", idem, {"session_id": session_id}),
            hook_registrations=[(s.plugin_id, codec.HOOK_REGISTRATION.dumps(s)) for _, s in registrations],
        )
        await self._insert_session(record, batch)
        for live, _ in registrations:
            await self._add_registration(ctx.tenant, live, already_stored=True)
        actor = self.registry.new_actor(record, history)
        await self.registry.adopt(actor)
        self.exporter.append(ctx.tenant, session_id, transcript)
        if overrides.api_key:
            self.registry.memory_keys[(ctx.tenant, session_id)] = register_secret(overrides.api_key)
        if copy_workspace and source_workspace.exists() and source_workspace != actor.workspace:
            await asyncio.to_thread(
                shutil.copytree, source_workspace, actor.workspace, symlinks=True, dirs_exist_ok=True
            )
        logger.info(
            "session forked",
            extra={"category": "system", "tenant": ctx.tenant, "session_id": session_id},
        )
        return self.view(record)

    async def resume_session(
        self, ctx: CallContext, session_id: str, overrides: SessionOverrides, idem: Idempotency | None = None
    ) -> SessionView:
        check_session_id(session_id)
        return await self._apply_overrides(ctx, session_id, overrides, identity=None, rpc="ResumeSession", idem=idem)

    async def continue_session(
        self,
        ctx: CallContext,
        identity: SessionIdentity,
        overrides: SessionOverrides,
        idem: Idempotency | None = None,
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
        async with self.registry.use(ctx.tenant, session_id) as actor, actor.lock:
            if await self.idempotency.replay(ctx.tenant, rpc, idem) is not None:
                return self.view(actor.record)
            config = overrides.apply(actor.record.config)
            check_config(
                config,
                known_profile=self.credentials.has_profile(config.auth_profile_id),
                field_prefix="overrides",
                limits=self.settings.input_limits,
            )
            changes: dict[str, Any] = {}
            if config != actor.record.config:
                changes["config"] = config
            if identity is not None and identity != actor.record.identity:
                if identity.mode != actor.record.identity.mode and actor.record.state is not SessionState.IDLE:
                    raise ServiceError(
                        ErrorCode.FAILED_PRECONDITION,
                        "IDENTITY_MISMATCH",
                        f"cannot change the mode of session {quoted(session_id)} while a run is "
                        f"{actor.record.state.value.lower()}",
                        metadata={"state": actor.record.state.value},
                    )
                changes["identity"] = identity
            answer = {"session_id": session_id}
            if changes:
                await actor.commit(idempotency=self.idempotency.record(ctx.tenant, rpc, idem, answer), **changes)
            else:
                await self.idempotency.remember(ctx.tenant, session_id, rpc, idem, answer)
            if overrides.api_key:
                self.registry.memory_keys[(ctx.tenant, session_id)] = register_secret(overrides.api_key)
            return self.view(actor.record)

    async def reset_session(
        self, ctx: CallContext, session_id: str, reason: str, idem: Idempotency | None = None
    ) -> SessionView:
        check_session_id(session_id)
        check_token("reason", reason)
        async with self.registry.use(ctx.tenant, session_id) as actor, actor.lock:
            if await self.idempotency.replay(ctx.tenant, "ResetSession", idem) is not None:
                return self.view(actor.record)
            await actor.stop_run(RunReason.SESSION_RESET)
            record = self.idempotency.record(ctx.tenant, "ResetSession", idem, {"session_id": session_id})
            await actor.reset(reason or "manual", idempotency=record)
            return self.view(actor.record)

    async def list_checkpoints(
        self, ctx: CallContext, session_id: str, *, page_size: int, page_token: str
    ) -> CheckpointPage:
        return await self.checkpoints.list_checkpoints(
            ctx.tenant, session_id, page_size=page_size, page_token=page_token
        )

    async def restore_checkpoint(
        self, ctx: CallContext, session_id: str, checkpoint_id: str, idem: Idempotency | None = None
    ) -> RestoreResult:
        """Rewinds the workspace to before the checkpoint; not while a run could be changing files."""
        check_session_id(session_id)
        replay = await self.idempotency.replay(ctx.tenant, "RestoreCheckpoint", idem)
        if replay is not None:
            return RestoreResult(
                restored_paths=tuple(replay["restored_paths"]), checkpoints_undone=int(replay["checkpoints_undone"])
            )
        async with self.registry.use(ctx.tenant, session_id) as actor, actor.lock:
            if actor.run is not None or actor.record.state is not SessionState.IDLE:
                raise actor.busy_error()
            result = await self.checkpoints.restore_checkpoint(ctx.tenant, session_id, checkpoint_id, actor.workspace)
        record = self.idempotency.record(
            ctx.tenant,
            "RestoreCheckpoint",
            idem,
            {"restored_paths": list(result.restored_paths), "checkpoints_undone": result.checkpoints_undone},
        )
        if record is not None:
            await self.store.write(WriteBatch(tenant=ctx.tenant, session_id=session_id, idempotency=record))
        return result

    async def get_history(
        self, ctx: CallContext, session_id: str, *, page_size: int, page_token: str
    ) -> tuple[list[TranscriptEntry], str]:
        check_session_id(session_id)
        if page_size < 0:
            raise invalid_argument("page_size", "must not be negative")
        if (
            self.registry.peek(ctx.tenant, session_id) is None
            and await self.store.get_session(ctx.tenant, session_id) is None
        ):
            raise session_not_found(session_id)
        limit = min(page_size or 100, 1000)
        digest = filters_digest({"session": session_id})
        after = 0
        if page_token:
            position = decode_token(page_token, digest)
            after = position.get("e", 0)
            if not isinstance(after, int) or after < 0:
                raise invalid_token("malformed")
        await self.store.flush()
        entries = await self.store.read_transcript(ctx.tenant, session_id, after_entry_id=after, limit=limit + 1)
        more = len(entries) > limit
        entries = entries[:limit]
        # Pages are also capped in bytes so a history of large images cannot exceed message limits.
        budget = self.settings.max_history_page_bytes
        kept: list[TranscriptEntry] = []
        for entry in entries:
            size = _approx_size(entry)
            if kept and size > budget:
                more = True
                break
            budget -= size
            kept.append(entry)
        next_token = encode_token({"e": kept[-1].entry_id}, digest) if more and kept else ""
        return kept, next_token

    # ------------------------------------------------------------------ credentials
    def resolve_credential(self, actor: SessionActor) -> Credential | None:
        return self.credentials.resolve(
            tenant=actor.tenant,
            session_profile_id=actor.record.config.auth_profile_id,
            memory_api_key=self.registry.memory_keys.get((actor.tenant, actor.session_id), ""),
        )


def _approx_size(entry: TranscriptEntry) -> int:
    body: Any = entry.body
    size = 64
    for part in getattr(body, "content", ()) or getattr(body, "output", ()):
        size += len(getattr(part, "data", b"")) * 4 // 3 + len(getattr(part, "text", ""))
    for name in ("text", "prompt", "summary", "input_json", "details_json"):
        size += len(getattr(body, name, "") or "")
    return size
