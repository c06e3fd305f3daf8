"""What every loaded session shares: the store, the model, settings and the server-wide services a run uses."""

from __future__ import annotations

from dataclasses import dataclass

from general_agent_server.domain.session import HostedToolDefinition
from general_agent_server.exports.event_log import EventLog
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.runner import HookRunner
from general_agent_server.mcp_servers.servers import McpServers
from general_agent_server.model.credentials import CredentialResolver, SessionKeys
from general_agent_server.model.port import ModelClient
from general_agent_server.sessions.ownership import Ownership
from general_agent_server.sessions.relay import CommandRelay
from general_agent_server.sessions.remote_tail import RemoteTails
from general_agent_server.sessions.serving import ServingGate
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.store.port import SessionStore
from general_agent_server.tenants.slots import RunSlots
from general_agent_server.tools.runtime import ToolCatalog
from general_agent_server.workspace.checkpoints.recorder import CheckpointRecorder


@dataclass(frozen=True, kw_only=True)
class SessionDeps:
    """What every loaded session shares."""

    store: SessionStore
    model: ModelClient
    settings: CoreSettings
    exporter: TranscriptExporter
    catalog: ToolCatalog
    credentials: CredentialResolver
    keys: SessionKeys
    gate: ServingGate
    ownership: Ownership
    # Follows other replicas' runs of the sessions with subscribers here (sessions/remote_tail.py).
    tails: RemoteTails
    global_hosted_tools: tuple[HostedToolDefinition, ...] = ()
    event_log: EventLog | None = None
    hooks: HookRunner | None = None
    checkpoints: CheckpointRecorder | None = None
    mcp: McpServers | None = None
    # Bounds concurrent runs per server and tenant (tenants/slots.py); None: unbounded.
    run_slots: RunSlots | None = None
    # Carries commands to the replica executing the session's run (sessions/relay.py); None: one process.
    relay: CommandRelay | None = None
