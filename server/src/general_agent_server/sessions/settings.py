"""Settings the core needs (a slice of the server's settings, free of transport concerns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from general_agent_server.domain.validation import InputLimits
from general_agent_server.hooks.plugins import PluginMode


@dataclass(frozen=True, kw_only=True, slots=True)
class CoreSettings:
    default_model_ref: str = "anthropic/claude-sonnet-4-6"
    max_tokens_cap: int = 64_000
    # Retries of a model stream that broke after the response started, and the first backoff.
    model_stream_retries: int = 2
    model_retry_backoff_seconds: float = 0.5
    replica_id: str = "local"
    # How long a session lease lasts without renewal (renewed every third of it while the actor is loaded).
    lease_ttl_seconds: float = 60.0
    subscriber_buffer: int = 4096
    sequence_block: int = 4096
    idempotency_ttl_seconds: float = 24 * 3600
    max_image_bytes: int = 5 * 1024 * 1024
    max_message_bytes: int = 20 * 1024 * 1024
    max_history_page_bytes: int = 4 * 1024 * 1024
    shutdown_grace_seconds: float = 10.0
    event_replay_batch: int = 500
    # The idle-session cache (ActorRegistry): at most this many idle actors, and at most this many
    # estimated bytes of them (sessions/footprint.py); least recently used evicted first.
    max_idle_actors: int = 1000
    max_idle_actor_bytes: int = 256 * 1024 * 1024
    workspace_root: Path = field(default_factory=lambda: Path(".general-agent/workspace"))
    # One workspace (the root itself) for every session instead of <root>/<tenant>/<session_id>.
    shared_workspace: bool = False
    max_model_calls_per_run: int = 50
    max_tool_calls_per_run: int = 200
    run_deadline_seconds: float = 30 * 60
    hosted_call_timeout_seconds: float = 24 * 3600
    hosted_call_timeout_max_seconds: float = 7 * 24 * 3600
    max_queued_turns: int = 8
    enqueue_timeout_seconds: float = 60.0
    heartbeat_seconds: float = 15.0
    event_retention_count: int = 10_000
    event_retention_seconds: float = 7 * 24 * 3600
    # Hosts exempt from the SSRF guard (web_fetch; hook targets and MCP HTTP URLs of tenant-role callers).
    ssrf_allow_hosts: frozenset[str] = frozenset()
    checkpoint_max_count: int = 100
    checkpoint_max_bytes: int = 64 * 1024 * 1024
    hook_max_payload_bytes: int = 1024 * 1024
    plugin_mode: PluginMode = PluginMode.ALLOWLISTED
    enabled_plugin_ids: tuple[str, ...] = ()
    # Bounds on what requests can make the server keep per session (system prompt, tools, labels, ...).
    input_limits: InputLimits = field(default_factory=InputLimits)
