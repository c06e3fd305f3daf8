"""The service behind every transport: the one object the gRPC servicer calls (docs/architecture.md).

It wires the domain services over the ports it is given (store, model, hook dialer) and owns the life cycle:
start-up recovery before serving, and a graceful shutdown. Each RPC lands on one service by noun:
`sessions` (create, get, list, delete, resume, continue, reset, history, checkpoints), `forks`, `runs`
(turns, hosted results, steering, stop, cancel, watch; RunSession attachments), `hooks` (registrations,
EmitHook)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from general_agent_server.domain.context import CallContext
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import RunReason
from general_agent_server.domain.session import HostedToolDefinition, SessionRecord
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.admin import HookAdmin
from general_agent_server.hooks.plugins import LoadedPlugins, load_plugins
from general_agent_server.hooks.registrations import HookDialer, HookRegistrationSpec
from general_agent_server.hooks.registry import HookRegistry
from general_agent_server.hooks.runner import HookOutcome, HookRunner
from general_agent_server.mcp_servers.servers import McpServers, McpSettings
from general_agent_server.memory.service import MemoryService
from general_agent_server.memory.tools import MemoryTools
from general_agent_server.model.credentials import CredentialResolver, SessionKeys
from general_agent_server.model.port import ModelClient
from general_agent_server.runs.attachment import Attachment
from general_agent_server.runs.commands import Attach
from general_agent_server.runs.control import RunControl
from general_agent_server.runs.recovery import repair_abandoned_runs
from general_agent_server.runs.relayed import RelayedCommands
from general_agent_server.runs.streams import EventStreams
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.children import ChildSessions
from general_agent_server.sessions.deps import SessionDeps
from general_agent_server.sessions.fork import ForkDeps, Forks
from general_agent_server.sessions.idempotency import IdempotencyKeys
from general_agent_server.sessions.mcp_service import McpService
from general_agent_server.sessions.ownership import Ownership
from general_agent_server.sessions.relay import CommandRelay
from general_agent_server.sessions.remote_tail import RemoteTails
from general_agent_server.sessions.service import SessionService, SessionServiceDeps
from general_agent_server.sessions.serving import ServingGate
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore
from general_agent_server.tenants.slots import RunSlots
from general_agent_server.tools.runtime import LocalTool, ToolCatalog
from general_agent_server.tools.subagents import SubagentTool
from general_agent_server.workspace.checkpoints.recorder import CheckpointBounds, CheckpointRecorder
from general_agent_server.workspace.checkpoints.service import CheckpointService

logger = logging.getLogger(__name__)


def _mcp_servers(settings: CoreSettings) -> McpServers:
    return McpServers(
        McpSettings(
            connect_timeout=settings.mcp_connect_timeout,
            call_timeout=settings.mcp_call_timeout,
            idle_timeout=settings.mcp_idle_timeout,
        )
    )


def _command_relay(store: SessionStore, settings: CoreSettings, ownership: Ownership) -> CommandRelay:
    """Commands for runs on other replicas (sessions/relay.py), claimed while this replica holds a lease."""
    return CommandRelay(
        store,
        owner=settings.replica_id,
        holding=lambda: ownership.holding,
        poll_seconds=settings.replica_poll_seconds,
    )


class Agent:
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
        memory: MemoryService | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.credentials = credentials
        self.gate = ServingGate()
        self.exporter = exporter
        self.event_log = event_log
        self.hook_dialer = hook_dialer
        self.plugins = LoadedPlugins(ids=())
        self.hook_runner = HookRunner(HookRegistry())
        keys = SessionKeys()
        idempotency = self._idempotency = IdempotencyKeys(store, ttl_seconds=settings.idempotency_ttl_seconds)
        recorder = CheckpointRecorder(
            store, CheckpointBounds(max_count=settings.checkpoint_max_count, max_bytes=settings.checkpoint_max_bytes)
        )
        # The subagents tool joins (a copy of) the catalog below: it drives child sessions through the services
        # built here, which the sessions' tool sets need first.
        builtins = dict(catalog.builtins)
        self.memory = memory
        catalog = replace(catalog, builtins=builtins, session_tools=MemoryTools(memory) if memory else None)
        self.catalog = catalog
        self.mcp = _mcp_servers(settings)
        self.run_slots = RunSlots(max_runs=settings.max_concurrent_runs, rules=settings.tenants)
        ownership = Ownership(store, settings)
        self.relay = _command_relay(store, settings, ownership)
        self.tails = RemoteTails(store)
        self.cache = SessionCache(
            SessionDeps(
                store=store,
                model=model,
                settings=settings,
                exporter=exporter,
                catalog=catalog,
                credentials=credentials,
                keys=keys,
                gate=self.gate,
                ownership=ownership,
                tails=self.tails,
                relay=self.relay,
                global_hosted_tools=global_hosted_tools,
                event_log=event_log,
                hooks=self.hook_runner,
                checkpoints=recorder,
                mcp=self.mcp,
                run_slots=self.run_slots,
            )
        )
        if memory is not None:
            # Built in, so not subject to plugin_mode; its handlers serve only the sessions with memory on.
            memory.attach(self._record)
            self.hook_runner.registry.register(memory.handlers())
        self.hooks = HookAdmin(
            store=store,
            runner=self.hook_runner,
            dialer=hook_dialer,
            limits=settings.input_limits,
            max_payload_bytes=settings.hook_max_payload_bytes,
            ssrf_allow_hosts=settings.ssrf_allow_hosts,
        )
        self._wire_services(credentials, keys, idempotency, recorder, builtins, global_hosted_tools)

    def _wire_services(
        self,
        credentials: CredentialResolver,
        keys: SessionKeys,
        idempotency: IdempotencyKeys,
        recorder: CheckpointRecorder,
        builtins: dict[str, LocalTool],
        global_hosted_tools: tuple[HostedToolDefinition, ...],
    ) -> None:
        settings, store, exporter, catalog, event_log = (
            self.settings,
            self.store,
            self.exporter,
            self.catalog,
            self.event_log,
        )
        self.sessions = SessionService(
            SessionServiceDeps(
                settings=settings,
                store=store,
                cache=self.cache,
                keys=keys,
                idempotency=idempotency,
                credentials=credentials,
                exporter=exporter,
                hooks=self.hooks,
                catalog=catalog,
                checkpoints=CheckpointService(store, recorder),
                gate=self.gate,
                global_hosted_tools=global_hosted_tools,
                event_log=event_log,
            )
        )
        self.forks = Forks(
            ForkDeps(
                sessions=self.sessions,
                store=store,
                cache=self.cache,
                keys=keys,
                idempotency=idempotency,
                hooks=self.hooks,
                exporter=exporter,
                gate=self.gate,
            )
        )
        self.runs = RunControl(
            cache=self.cache,
            store=store,
            settings=settings,
            gate=self.gate,
            keys=idempotency,
            streams=EventStreams(store=store, cache=self.cache, replay_batch=settings.event_replay_batch),
        )
        self.mcp_servers = McpService(cache=self.cache, keys=idempotency, settings=settings)
        children = ChildSessions(sessions=self.sessions, control=self.runs, cache=self.cache, keys=keys)
        builtins["subagents"] = SubagentTool(
            children, builtin_names=frozenset(builtins), timeout_seconds=settings.run_deadline
        )

    def _record(self, tenant: str, session_id: str) -> SessionRecord | None:
        session = self.cache.peek(tenant, session_id)
        return session.record if session is not None else None

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Start-up recovery: runs interrupted by a crash are marked FAILED/INTERRUPTED (those whose lease this
        replica can take: another replica's live runs are left alone); suspended sessions come back into memory so
        their hosted deadlines are armed (expired ones fire). No session can fail the start."""
        self.exporter.start()
        self.cache.start()
        self.relay.start(RelayedCommands(self.cache, self._idempotency).execute)
        if self.event_log is not None:
            self.event_log.start()
        settings = self.settings
        recovered = await repair_abandoned_runs(
            self.store,
            owner=settings.replica_id,
            ttl_seconds=settings.lease_ttl_seconds,
            sequence_block=settings.sequence_block,
        )
        if recovered:
            logger.info("marked %d interrupted run(s) as FAILED/INTERRUPTED", recovered, extra={"category": "system"})
        self.plugins = load_plugins(
            self.hook_runner.registry, mode=self.settings.plugin_mode, enabled_ids=self.settings.enabled_plugin_ids
        )
        await self.hooks.load()
        if self.memory is not None:
            await self.memory.start()  # what the outbox kept from before a restart is sent now
        for tenant, session_id in dict.fromkeys(
            (c.tenant, c.session_id) for c in await self.store.list_waiting_calls()
        ):
            try:
                async with self.cache.use(tenant, session_id):
                    pass
            except Exception:
                logger.exception("could not load suspended session %s", session_id, extra={"category": "system"})

    async def shutdown(self, grace_seconds: float) -> None:
        """New turns are refused; running runs get the grace, then stop as FAILED/INTERRUPTED; watch streams end
        UNAVAILABLE so clients reconnect with after_sequence."""
        self.gate.close()
        # Only executing runs get the grace; suspended runs stay suspended (they have no task).
        tasks = [s.run.task for s in self.cache.active() if s.run is not None and s.run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_seconds)
            for session in self.cache.active():
                session.cancel_run(RunReason.INTERRUPTED)
            # A run task ends when its run finishes or suspends; either way nothing is left running.
            await asyncio.gather(*tasks, return_exceptions=True)
        error = ServiceError(
            ErrorCode.UNAVAILABLE,
            "SHUTTING_DOWN",
            "the server is shutting down; reconnect with after_sequence",
            retry_after_seconds=1.0,
        )
        for session in self.cache.active():
            session.ledger.close_subscribers(error)
        await self.tails.close()
        # session_end for the sessions of this process, and gateway_stop, are awaited within their timeouts.
        await asyncio.gather(*(s.end_session_hooks(wait=True) for s in self.cache.loaded()))
        await self._fire_gateway("gateway_stop", {"reason": "shutdown"})
        await asyncio.gather(*self.hook_runner.background, return_exceptions=True)
        if self.memory is not None:
            await self.memory.aclose()  # after agent_end's captures have reached the outbox
        # Background processes of tools (exec) and MCP servers die with the server.
        await self.catalog.aclose()
        await self.mcp.aclose()
        await self.relay.close()
        await self.cache.close()  # leases released: another replica may take these sessions at once
        await self.exporter.close()
        if self.hook_dialer is not None:
            await self.hook_dialer.close()
        if self.event_log is not None:
            await self.event_log.close()

    def gateway_started(self, port: int) -> None:
        """The server listens: gateway_start with the bound port, not awaited."""
        self.hook_runner.fire("gateway_start", {"port": port}, {"port": port})

    async def _fire_gateway(self, hook: str, event: dict[str, Any]) -> None:
        try:
            await self.hook_runner.run(hook, event, {"port": event.get("port", 0)} if "port" in event else {})
        except Exception:
            logger.exception("hook %s failed", hook, extra={"category": "system"})

    # ------------------------------------------------------------------ what spans services
    def attach(self, ctx: CallContext, attach: Attach) -> Attachment:
        """A RunSession stream attached to a session."""
        return Attachment(
            control=self.runs,
            cache=self.cache,
            gate=self.gate,
            ctx=ctx,
            attach=attach,
            buffer=self.settings.subscriber_buffer,
            heartbeat_seconds=self.settings.heartbeat_seconds,
        )

    async def register_hooks(self, ctx: CallContext, spec: HookRegistrationSpec) -> HookRegistrationSpec:
        if spec.session_id:
            await self.sessions.get_session(ctx, spec.session_id)
        return await self.hooks.register(ctx, spec)

    async def emit_hook(
        self, ctx: CallContext, hook: str, event: dict[str, Any], context: dict[str, Any], session_id: str = ""
    ) -> HookOutcome:
        self.hooks.check_hook_name(hook)
        if session_id:
            await self.sessions.get_session(ctx, session_id)
        return await self.hooks.emit(ctx, hook, event, context, session_id)

    async def session_registrations(self, tenant: str, session_id: str) -> Sequence[HookRegistrationSpec]:
        return await self.hooks.registrations(tenant, session_id)
