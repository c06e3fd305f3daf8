"""The settings the domain reads: a slice of the server's settings (config/table.py declares each one, with its
default), under the same names, with lists, paths and modes parsed. Only the internal constants below, which
are not settings, have their values here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from general_agent_server.domain.validation import InputLimits
from general_agent_server.hooks.plugins import PluginMode
from general_agent_server.tenants.rules import TenantRules


@dataclass(frozen=True, kw_only=True, slots=True)
class CoreSettings:
    default_model: str
    max_tokens_cap: int
    model_max_retries: int
    model_retry_backoff: float
    replica_id: str
    lease_ttl_seconds: float
    subscriber_buffer: int
    max_image_bytes: int
    max_message_bytes: int
    max_history_page_bytes: int
    max_idle_sessions: int
    max_idle_session_bytes: int
    shutdown_grace: float
    workspace_dir: Path
    workspace_mode: str
    max_model_calls_per_run: int
    max_tool_calls_per_run: int
    run_deadline: float
    hosted_call_timeout: float
    hosted_call_timeout_max: float
    max_queued_turns: int
    enqueue_timeout: float
    event_retention_count: int
    event_retention_days: float
    ssrf_allow_hosts: frozenset[str]
    checkpoint_max_count: int
    checkpoint_max_bytes: int
    hook_max_payload_bytes: int
    plugin_mode: PluginMode
    enabled_plugin_ids: tuple[str, ...]
    input_limits: InputLimits
    compaction_keep_recent_turns: int
    compaction_summary_max_tokens: int
    compaction_timeout: float
    context_windows: tuple[tuple[str, int], ...]
    mcp_connect_timeout: float
    mcp_call_timeout: float
    mcp_idle_timeout: float
    mcp_stdio_allow: frozenset[str]
    approval_policy: tuple[str, ...]
    approval_timeout: float
    memory_backend: str = "local"
    max_concurrent_runs: int = 0
    # Store reads of a replica following another's run or waiting for relayed commands (remote_tail.py, relay.py).
    replica_poll_seconds: float = 0.05
    # Per-tenant rules: exec, approval policy, limits (tenants/rules.py).
    tenants: TenantRules = field(default_factory=TenantRules)
    # Internal constants, not settings:
    # sequences reserved in the session record per block, so a crash never reuses one;
    sequence_block: int = 4096
    # how long idempotency keys are kept (at least 24 hours, docs/protocol.md);
    idempotency_ttl_seconds: float = 24 * 3600
    # events read from the log per query when a stream replays;
    event_replay_batch: int = 500
    # how often an idle RunSession stream gets a heartbeat.
    heartbeat_seconds: float = 15.0

    @property
    def shared_workspace(self) -> bool:
        """One workspace (the root itself) for every session instead of <root>/<tenant>/<session_id>."""
        return self.workspace_mode == "shared"

    @property
    def event_retention_seconds(self) -> float:
        return self.event_retention_days * 86_400
