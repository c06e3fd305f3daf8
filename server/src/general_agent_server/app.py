"""Builds and runs the gRPC server: servicers, health, reflection, interceptors, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import sniffio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from general_agent.v1 import agent_service_pb2
from general_agent_server.agent import Agent
from general_agent_server.api import transport
from general_agent_server.api.handlers import add_service
from general_agent_server.api.hook_client import GrpcHookDialer
from general_agent_server.api.reflection import enable_server_reflection
from general_agent_server.api.server_limits import server_limits
from general_agent_server.api.servicer import AgentServicer
from general_agent_server.config import ConfigError, ServerSettings, StartError
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.registrations import HookDialer
from general_agent_server.memory.service import MemoryService
from general_agent_server.memory.setup import build_memory
from general_agent_server.model.anthropic import AnthropicModelClient
from general_agent_server.model.credentials import CredentialResolver
from general_agent_server.model.port import ModelClient
from general_agent_server.observability.metered_model import MeteredModelClient
from general_agent_server.observability.port import Observer
from general_agent_server.observability.setup import Observability, start_observability
from general_agent_server.security.redaction import register_secret
from general_agent_server.store.port import SessionStore, StoreError
from general_agent_server.store.postgres import PostgresSessionStore, parse_store_url
from general_agent_server.store.sqlite import DB_FILE_NAME, SqliteSessionStore
from general_agent_server.tools.catalog import builtin_catalog

logger = logging.getLogger(__name__)

SERVICE = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"]
SERVICE_NAME = SERVICE.full_name


@dataclass
class RunningServer:
    """A started server; `address` is the bound HOST:PORT (port 0 resolved)."""

    address: str
    server: grpc.aio.Server
    agent: Agent
    store: SessionStore
    model: AnthropicModelClient

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file of a server on the default store (tests read it raw)."""
        assert isinstance(self.store, SqliteSessionStore)
        return self.store.path

    health: health.aio.HealthServicer
    settings: ServerSettings
    observability: Observability = field(default_factory=Observability)

    @property
    def metrics_address(self) -> str:
        """HOST:PORT of /metrics (empty without metrics_listen)."""
        server = self.observability.metrics_server
        return server.address if server is not None else ""

    async def stop(self, grace: float | None = None) -> None:
        grace = self.settings.shutdown_grace if grace is None else grace
        await self.health.enter_graceful_shutdown()
        await self.agent.shutdown(grace)
        await self.server.stop(min(grace, 2.0))
        await self.store.close()
        await self.model.close()
        # Off the loop: the trace exporter's last flush may need a collector served by this loop (tests).
        await asyncio.to_thread(self.observability.stop)
        logger.info("server stopped", extra={"category": "system"})


def build_agent(
    settings: ServerSettings,
    *,
    store: SessionStore,
    model: ModelClient,
    hook_dialer: HookDialer | None = None,
    memory: MemoryService | None = None,
) -> Agent:
    """The agent over the given ports, configured from the settings (in-process tests use it with the
    in-memory store and the scripted model). Memory is built from the settings unless given."""
    state_dir = Path(settings.state_dir)
    if memory is None:
        memory = build_memory(settings.memory(), os.environ)
    return Agent(
        settings=settings.core(),
        store=store,
        model=model,
        credentials=CredentialResolver(
            settings.auth_profiles,
            tenant_defaults=settings.tenant_default_profiles,
            server_default=settings.default_profile,
        ),
        exporter=TranscriptExporter(state_dir / "transcripts"),
        catalog=builtin_catalog(settings),
        global_hosted_tools=settings.hosted_tools,
        event_log=EventLog(state_dir / "events") if settings.event_log else None,
        hook_dialer=hook_dialer,
        memory=memory,
    )


async def start_server(settings: ServerSettings) -> RunningServer:
    """Starts every part, or, when one fails, closes those already open and raises: a server that cannot
    start never lingers half-started (threads, ports and leases released)."""
    cleanup = contextlib.AsyncExitStack()
    try:
        return await _start_parts(settings, cleanup)
    except BaseException:
        await cleanup.aclose()
        raise


async def _start_parts(settings: ServerSettings, cleanup: contextlib.AsyncExitStack) -> RunningServer:
    state_dir = Path(settings.state_dir)
    try:
        await asyncio.to_thread(state_dir.mkdir, parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StartError(f"state_dir: cannot create {state_dir}: {exc.strerror or exc}") from None
    store = open_store(settings, os.environ)
    try:
        await store.open()
    except StoreError as exc:
        raise StartError(f"store: {exc}") from None
    cleanup.push_async_callback(store.close)
    model = AnthropicModelClient(
        timeout_seconds=settings.model_request_timeout,
        max_retries=settings.model_max_retries,
        http_client=settings.model_http_client,
    )
    cleanup.push_async_callback(model.close)
    observability = start_observability(settings)
    cleanup.callback(observability.stop)
    observer = observability.observer
    agent = build_agent(
        settings,
        store=store,
        model=model if observer is None else MeteredModelClient(model, observer),
        hook_dialer=GrpcHookDialer(trace_context=observability.spans is not None),
    )
    if observer is not None:
        _observe(agent, store, observer, observability)
    await model.warm(agent.credentials.configured())
    server = grpc.aio.server(
        interceptors=[*observability.server_interceptors(), *transport.interceptors(settings, observer)],
        options=transport.server_options(settings),
    )
    # Not the generated add_AgentServiceServicer_to_server: requests are decoded by api/decoding.py, which
    # answers undecodable or invalid requests INVALID_ARGUMENT instead of grpc's UNKNOWN.
    add_service(AgentServicer(agent, limits=server_limits(settings)), SERVICE, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_server_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), server)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    host, _, _ = settings.listen.rpartition(":")
    port = transport.add_port(server, settings)
    await server.start()
    cleanup.push_async_callback(server.stop, 0)
    # Health stays NOT_SERVING until start-up recovery has finished.
    cleanup.push_async_callback(agent.shutdown, 0)
    await agent.start()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    address = f"{host}:{port}"
    logger.info("serving on %s", address, extra={"category": "system"})
    agent.gateway_started(port)
    return RunningServer(
        address=address,
        server=server,
        agent=agent,
        store=store,
        model=model,
        health=health_servicer,
        settings=settings,
        observability=observability,
    )


def _observe(
    agent: Agent, store: SqliteSessionStore | PostgresSessionStore, observer: Observer, observability: Observability
) -> None:
    """The parts that report to the observer (observability/port.py), and the gauges read when scraped."""
    agent.hook_runner.observer = observer
    agent.hook_runner.spans = observability.spans
    if observability.spans is not None:
        agent.mcp.send_trace_context()
    store.observe(observer)
    if observability.metrics is not None:
        observability.metrics.watch(
            active_runs=lambda: agent.run_slots.active,
            queued_turns=lambda: sum(s.queued_turns for s in agent.cache.loaded()),
        )


def open_store(settings: ServerSettings, environ: Mapping[str, str]) -> SqliteSessionStore | PostgresSessionStore:
    """The store the settings name: SQLite under state_dir, or PostgreSQL with the password from
    store_password_file or PGPASSWORD (registered as a secret, so no log or error shows it)."""
    flush = settings.store_flush_interval_ms / 1000
    if not settings.store:
        return SqliteSessionStore(Path(settings.state_dir) / DB_FILE_NAME, flush_interval=flush)
    if settings.store_password_file:
        try:
            password = Path(settings.store_password_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"store_password_file: cannot read {settings.store_password_file}: {exc.strerror}"
            ) from None
    else:
        password = environ.get("PGPASSWORD", "")
    dsn = parse_store_url(settings.store, password=register_secret(password) if password else "")
    logger.info("session store: %s", dsn.redacted, extra={"category": "system"})
    return PostgresSessionStore(dsn, flush_interval=flush)


def write_ready_file(path: str, address: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(target.suffix + ".tmp")
    temporary.write_text(json.dumps({"address": address, "pid": os.getpid()}))
    temporary.replace(target)  # atomic: a watcher never reads half a file


def freeze_start_up() -> int:
    """Moves what start-up built (modules, classes, the tool catalog: most of the heap, alive as long as the process)
    out of the garbage collector's sight, so a full collection walks only what serving created: ~10 ms instead of
    ~85 ms per full collection under 200 sessions (bench/README.md). Only the serving process calls it: frozen
    objects are never collected, which suits start-up's, not a test process's. Answers how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def name_the_loop_library() -> None:
    """Tells sniffio that this thread runs asyncio. anyio and the SDK's HTTP stack ask sniffio which async library
    runs several times per model request, and without a name set it finds out by looking up the current task each
    time (about 1% of the event loop's CPU per turn, bench/README.md). The name is per thread, and the serving
    process's loop owns its thread for the process's life; threads the loop hands work to are not named."""
    sniffio.thread_local.name = "asyncio"


async def serve(settings: ServerSettings) -> None:
    """Runs until SIGTERM or SIGINT, then shuts down gracefully."""
    name_the_loop_library()
    running = await start_server(settings)
    freeze_start_up()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if settings.ready_file:
        write_ready_file(settings.ready_file, running.address)
    await stop.wait()
    logger.info("shutting down", extra={"category": "system"})
    await running.stop()
