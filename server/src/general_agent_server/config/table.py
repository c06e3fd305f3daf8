"""Every setting, declared once: name, type, default and help, as a field of ServerSettings. The flags, the
GENERAL_AGENT_* environment, the TOML file, `general-agent settings` and
docs/configuration.md all come from these fields (config/loading.py, config/docs.py)."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from general_agent_server.config.fields import setting
from general_agent_server.config.trust import TrustSettings
from general_agent_server.domain.session import HostedToolDefinition
from general_agent_server.domain.validation import DEFAULT_LIMITS, InputLimits
from general_agent_server.hooks.plugins import PluginMode, normalise_plugin_ids
from general_agent_server.memory.settings import MemorySettings
from general_agent_server.model.credentials import AuthProfile
from general_agent_server.model.port import HTTP_CLIENTS
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.tenants.rules import TenantRules
from general_agent_server.tools.runtime import ToolLimits

MIB = 1024 * 1024
__all__ = ["MIB", "SETTINGS", "ServerSettings", "Setting", "setting"]


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One row of the settings table."""

    name: str
    kind: type
    default: Any
    help: str

    @property
    def env(self) -> str:
        return "GENERAL_AGENT_" + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> str:
        """The flag as the README lists it; a boolean also has its `--no-` form."""
        if self.kind is bool:
            return f"`{self.flag}` / `--no-{self.flag[2:]}`"
        return f"`{self.flag}`"


@dataclass(frozen=True, kw_only=True)
class ServerSettings(TrustSettings):
    listen: str = setting("127.0.0.1:50051", "HOST:PORT to listen on; port 0 picks a free port.")
    ready_file: str = setting("", "Written with {address, pid} once health is SERVING.")
    state_dir: str = setting(".general-agent/state", "SQLite state and transcript exports.")
    workspace_dir: str = setting(".general-agent/workspace", "Root of session workspaces.")
    default_model: str = setting("anthropic/claude-sonnet-4-6", "Model ref for sessions without one.")
    max_tokens_cap: int = setting(64_000, "Upper bound on max_tokens of any model call.")
    insecure_listen: bool = setting(False, "Allow a non-loopback listen address without auth tokens.")
    shutdown_grace: float = setting(10.0, "Seconds running runs get at shutdown.")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR.")
    log_format: str = setting("json", "json (structured) or text.")
    model_request_timeout: float = setting(600.0, "Seconds per model request.")
    model_max_retries: int = setting(
        2,
        "Retries of a model call: 408/409/429/5xx/529 and network errors (by the SDK), and streams that break "
        "after the response started (by the run loop).",
    )
    model_http_client: str = setting(
        HTTP_CLIENTS[0],
        "HTTP client under the anthropic SDK: aiohttp (the SDK's aiohttp transport: about a third less CPU per model "
        "request) or httpx (the SDK's default).",
    )
    model_retry_backoff: float = setting(
        0.5, "Seconds before the first retry of a model stream that broke mid-way (doubled each retry, at most 8)."
    )
    max_receive_message_length: int = setting(32 * MIB, "Largest gRPC message accepted, bytes.")
    max_image_bytes: int = setting(5 * MIB, "Largest image part, bytes.")
    max_message_bytes: int = setting(20 * MIB, "Largest user message, bytes.")
    max_system_prompt_bytes: int = setting(
        DEFAULT_LIMITS.max_system_prompt_bytes, "Largest system prompt of a session, bytes (UTF-8)."
    )
    max_hosted_tools: int = setting(DEFAULT_LIMITS.max_hosted_tools, "Hosted tools one session may define.")
    max_hosted_tool_schema_bytes: int = setting(
        DEFAULT_LIMITS.max_hosted_tool_schema_bytes, "Largest input schema of one hosted tool, bytes of compact JSON."
    )
    max_hosted_tool_description_bytes: int = setting(
        DEFAULT_LIMITS.max_hosted_tool_description_bytes, "Largest description of one hosted tool, bytes."
    )
    max_labels: int = setting(DEFAULT_LIMITS.max_labels, "Labels one session may carry.")
    max_label_key_chars: int = setting(DEFAULT_LIMITS.max_label_key_chars, "Longest label key, characters.")
    max_label_value_chars: int = setting(DEFAULT_LIMITS.max_label_value_chars, "Longest label value, characters.")
    max_allowed_tools: int = setting(DEFAULT_LIMITS.max_allowed_tools, "Entries of a session's allowed_tools.")
    max_session_key_chars: int = setting(DEFAULT_LIMITS.max_session_key_chars, "Longest session_key, characters.")
    max_hook_registrations: int = setting(
        DEFAULT_LIMITS.max_hook_registrations,
        "Hook registrations per scope (one session, or a tenant's server-wide ones).",
    )
    max_hook_tls_pem_bytes: int = setting(
        DEFAULT_LIMITS.max_hook_tls_pem_bytes,
        "Largest PEM (CA, client certificate or key) of a hook target's TLS, bytes.",
    )
    subscriber_buffer: int = setting(4096, "Events buffered per stream before SLOW_CONSUMER.")
    store_flush_interval_ms: float = setting(20.0, "Group-commit window for buffered events.")
    store: str = setting(
        "",
        "Session store: empty for SQLite under state_dir, or postgresql://user@host:port/database for replicas on "
        "several hosts (docs/deployment.md; the password comes from PGPASSWORD or store_password_file, never the URL).",
    )
    store_password_file: str = setting("", "File holding the PostgreSQL password of `store` (else PGPASSWORD).")
    replica_id: str = setting(
        "local", "Lease owner id of this server process; replicas sharing a store need distinct ids."
    )
    workers: int = setting(
        1,
        "Server processes sharing `listen` and the store (SO_REUSEPORT), each replica `replica_id`-N; a supervisor"
        " restarts one that dies.",
    )
    reuse_port: bool = setting(
        False, "Share `listen` with other processes (SO_REUSEPORT); `workers` sets it for its own."
    )
    lease_ttl_seconds: float = setting(
        60.0, "Seconds a session lease lasts unrenewed (held while a run is active, renewed every third of it)."
    )
    replica_poll_seconds: float = setting(
        0.05,
        "Seconds between store reads while following another replica's run or waiting for a relayed command (ten"
        " times that while the followed session is idle). With PostgreSQL, LISTEN/NOTIFY wakes them at once and"
        " this is only the fallback for a missed notification; SQLite worker processes rely on it.",
    )
    max_history_page_bytes: int = setting(4 * MIB, "Bytes of transcript entries one GetSessionHistory page carries.")
    max_idle_sessions: int = setting(1000, "Idle sessions kept loaded in memory (least recently used evicted first).")
    max_idle_session_bytes: int = setting(
        256 * MIB, "Estimated bytes of idle loaded sessions (history, system prompt, tool schemas); LRU evicted beyond."
    )
    max_model_calls_per_run: int = setting(50, "Model calls one run may make.")
    max_tool_calls_per_run: int = setting(200, "Tool calls one run may make.")
    run_deadline: float = setting(1800.0, "Seconds one run may take (suspensions excluded).")
    hosted_call_timeout: float = setting(86_400.0, "Default seconds a host has to answer a hosted call.")
    hosted_call_timeout_max: float = setting(604_800.0, "Upper bound on any hosted call deadline.")
    max_queued_turns: int = setting(8, "ENQUEUE turns waiting per session.")
    enqueue_timeout: float = setting(60.0, "Seconds an ENQUEUE turn waits before it fails SESSION_BUSY.")
    event_retention_count: int = setting(10_000, "Events kept per session (newest).")
    event_retention_days: float = setting(7.0, "Days events are kept per session.")
    event_log: bool = setting(
        False, "Also write the raw event log JSONL (query_started + every event) under <state_dir>/events."
    )
    tool_timeout: float = setting(120.0, "Default seconds a local tool may run.")
    max_tool_output_chars: int = setting(100_000, "Tool output cap (text), with a notice.")
    workspace_mode: str = setting(
        "per_session",
        "per_session (<workspace_dir>/<tenant>/<session_id>) or shared (<workspace_dir>, one tenant only).",
    )
    exec_enabled: bool = setting(True, "Offer the exec and process tools (CODING mode).")
    exec_timeout: float = setting(120.0, "Default seconds an exec command may run.")
    exec_timeout_max: float = setting(1800.0, "Largest timeout an exec call may ask for.")
    exec_env_allow: str = setting(
        "PATH,HOME,LANG,LC_ALL,LC_CTYPE,TERM,TZ,USER,LOGNAME,SHELL,TMPDIR",
        "Comma-separated environment variables exec commands inherit; nothing else reaches them.",
    )
    exec_user: str = setting(
        "",
        "User (name or uid) exec commands run as when the server runs as root; empty: nobody. `root` lets "
        "commands read the server's memory and files. A server run as another user runs them as itself.",
    )
    ssrf_allow_hosts: str = setting(
        "",
        "Comma-separated hosts (names or IPs) exempt from the SSRF guard (web_fetch; tenant-role callers' "
        "hook targets and MCP URLs).",
    )
    web_fetch_cache_ttl_minutes: float = setting(15.0, "web_fetch cache TTL; <=0 disables.")
    web_fetch_timeout_seconds: float = setting(30.0, "web_fetch timeout per request.")
    web_fetch_max_chars_cap: int = setting(50_000, "Upper bound on web_fetch maxChars.")
    web_fetch_max_response_bytes: int = setting(2_000_000, "Bytes of a body web_fetch reads.")
    web_fetch_max_redirects: int = setting(3, "Redirects web_fetch follows.")
    web_fetch_user_agent: str = setting(
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
        "User-Agent of web_fetch requests.",
    )
    web_fetch_readability: bool = setting(True, "Extract readable text from HTML.")
    web_fetch_firecrawl_enabled: bool = setting(
        True, "Fall back to Firecrawl when a fetch fails or finds no readable text; needs FIRECRAWL_API_KEY."
    )
    web_fetch_firecrawl_base_url: str = setting(
        "https://api.firecrawl.dev", "Firecrawl API base; a bare host gets /v2/scrape, any other path is used as is."
    )
    web_fetch_firecrawl_only_main_content: bool = setting(True, "Ask Firecrawl for the main content only.")
    web_fetch_firecrawl_max_age_ms: int = setting(
        172_800_000, "Oldest Firecrawl cached copy accepted, in milliseconds."
    )
    web_fetch_firecrawl_timeout_seconds: float = setting(
        0.0, "Firecrawl request timeout; 0 means web_fetch_timeout_seconds."
    )
    web_search_duckduckgo_url: str = setting(
        "https://html.duckduckgo.com/html", "DuckDuckGo HTML endpoint (keyless web_search)."
    )
    web_search_brave_url: str = setting(
        "https://api.search.brave.com/res/v1/web/search",
        "Brave Search endpoint (used when BRAVE_API_KEY or BRAVE_SEARCH_API_KEY is set).",
    )
    web_search_cache_ttl_minutes: float = setting(15.0, "web_search cache TTL; <=0 disables.")
    checkpoint_max_count: int = setting(100, "File checkpoints kept per session (newest).")
    checkpoint_max_bytes: int = setting(
        64 * MIB, "Bytes of prior file contents kept in checkpoints per session (oldest dropped first)."
    )
    compaction_keep_recent_turns: int = setting(
        2, "User turns (with their tool exchanges) a compaction keeps verbatim after the summary."
    )
    compaction_summary_max_tokens: int = setting(4096, "max_tokens of each summarisation request of a compaction.")
    compaction_timeout: float = setting(
        300.0, "Seconds a compaction's summary may take; past it the history stays as it was."
    )
    context_windows: str = setting(
        "",
        "Comma-separated overrides of the model table's context window, `key=tokens`; a key matches a model ref "
        "that contains it (e.g. `sonnet-4-6=1000000`).",
    )
    mcp_connect_timeout: float = setting(
        10.0,
        "Seconds a model call waits for the session's MCP servers still connecting before it goes on without them.",
    )
    mcp_call_timeout: float = setting(60.0, "Seconds one MCP tool call may take.")
    mcp_idle_timeout: float = setting(
        300.0, "Seconds a session's MCP servers stay connected after its last run ended (or suspended)."
    )
    mcp_stdio_allow: str = setting(
        "",
        "Comma-separated commands tenant-role callers may start as stdio MCP servers (the operator may start any).",
    )
    approval_policy: str = setting(
        "",
        "Comma-separated default approval policy of sessions that set none: tool names, `mutating` (write, edit, "
        "apply_patch, exec, process, MCP tools not annotated read-only) or `all`; empty: nothing needs approval.",
    )
    approval_timeout: float = setting(
        86_400.0, "Seconds a person has to answer a policy's approval request (capped by hosted_call_timeout_max)."
    )
    hook_max_payload_bytes: int = setting(
        MIB, "Bytes of message history one remote hook call carries (oldest dropped first, `truncated` set)."
    )
    plugin_mode: str = setting(
        "ALLOWLISTED",
        "In-process plugins: DISABLED, ALLOWLISTED (only enabled_plugin_ids) or FULL_EMBEDDED (all installed).",
    )
    enabled_plugin_ids: str = setting(
        "", "Comma-separated plugin ids (entry points of group general_agent.plugins) to load when ALLOWLISTED."
    )
    anthropic_api_key_file: str = setting("", "File holding the default profile's API key (else ANTHROPIC_API_KEY).")
    memory_backend: str = setting(
        "local",
        "Memory (docs/memory.md): local (SQLite FTS5 under <state_dir>/memory, no network), everme (the EverMe "
        "gateway; credentials from EVERME_* variables or the env file) or off.",
    )
    memory_default_enabled: bool = setting(
        False, "Sessions whose memory.enabled is unset use memory (else only those that set it)."
    )
    memory_recall_top_k: int = setting(5, "Memories recalled per turn at most (1-20); a session may ask fewer or more.")
    memory_recall_budget_chars: int = setting(
        4000, "Characters the recall block may take, wrapper included; a session may set its own."
    )
    memory_recall_timeout: float = setting(
        2.0, "Seconds recall may take before the turn goes on without it (the one deadline of recall)."
    )
    memory_everme_env_file: str = setting(
        "",
        "An env file of EVERME_* keys (else EVERME_ENV_FILE); it never overrides the shell but for the token and id.",
    )
    memory_everme_tenant: str = setting("default", "The tenant whose sessions the EverMe backend serves.")
    memory_everme_user_id: str = setting(
        "", "The memory.user_id of the person the EverMe token belongs to; only their sessions use the gateway."
    )

    # From the environment and the TOML file only (never flags), and secrets never from either's values:
    default_profile: AuthProfile | None = field(default=None, repr=False)
    auth_profiles: Mapping[str, AuthProfile] = field(default_factory=dict, repr=False)
    tenant_default_profiles: Mapping[str, str] = field(default_factory=dict)
    hosted_tools: tuple[HostedToolDefinition, ...] = ()
    brave_api_key: str = field(default="", repr=False)
    firecrawl_api_key: str = field(default="", repr=False)

    @property
    def input_limits(self) -> InputLimits:
        """The max_* settings that bound what a request can make the server keep per session."""
        return InputLimits(**{name: getattr(self, name) for name in INPUT_LIMIT_NAMES})

    def core(self) -> CoreSettings:
        """The slice the domain reads: the same names, with the parsed forms of lists, paths and modes."""
        copied = {name: getattr(self, name) for name in CORE_COPIED}
        return CoreSettings(
            **copied,
            workspace_dir=Path(self.workspace_dir).resolve(),
            ssrf_allow_hosts=host_list(self.ssrf_allow_hosts),
            plugin_mode=PluginMode(self.plugin_mode.upper().replace("-", "_")),
            enabled_plugin_ids=normalise_plugin_ids(self.enabled_plugin_ids.split(",")),
            input_limits=self.input_limits,
            context_windows=context_windows(self.context_windows),
            mcp_stdio_allow=frozenset(c.strip() for c in self.mcp_stdio_allow.split(",") if c.strip()),
            approval_policy=tuple(e.strip() for e in self.approval_policy.split(",") if e.strip()),
            tenants=self.tenant_rules(),
        )

    def tenant_rules(self) -> TenantRules:
        return TenantRules(
            auth_enabled=self.auth.enabled,
            operator_tenants=self.auth.admin_tenants(),
            policies=self.tenants,
            max_concurrent_runs_per_tenant=self.max_concurrent_runs_per_tenant,
            max_sessions_per_tenant=self.max_sessions_per_tenant,
        )

    def memory(self) -> MemorySettings:
        return MemorySettings(
            backend=self.memory_backend,
            default_enabled=self.memory_default_enabled,
            recall_top_k=self.memory_recall_top_k,
            recall_budget_chars=self.memory_recall_budget_chars,
            recall_timeout=self.memory_recall_timeout,
            state_dir=Path(self.state_dir) / "memory",
            everme_env_file=self.memory_everme_env_file,
            everme_tenant=self.memory_everme_tenant,
            everme_user_id=self.memory_everme_user_id,
            drain_timeout=min(5.0, self.shutdown_grace),
        )

    def tool_limits(self) -> ToolLimits:
        return ToolLimits(max_output_chars=self.max_tool_output_chars, default_timeout_seconds=self.tool_timeout)


def context_windows(value: str) -> tuple[tuple[str, int], ...]:
    """`key=tokens,key=tokens` as pairs (config/checks.py has refused anything else)."""
    pairs = []
    for item in value.split(","):
        if item.strip():
            key, _, tokens = item.partition("=")
            pairs.append((key.strip(), int(tokens)))
    return tuple(pairs)


def host_list(value: str) -> frozenset[str]:
    """A comma-separated setting as a set (trimmed, lower-cased, empties dropped)."""
    return frozenset(item.strip().lower() for item in value.split(",") if item.strip())


_HINTS = typing.get_type_hints(ServerSettings)
_TRUST = {f.name for f in fields(TrustSettings)}
SETTINGS: tuple[Setting, ...] = tuple(
    Setting(name=f.name, kind=_HINTS[f.name], default=f.default, help=f.metadata["help"])
    # The base's settings (config/trust.py) after the others.
    for f in sorted(fields(ServerSettings), key=lambda f: f.name in _TRUST)
    if "help" in f.metadata
)
INPUT_LIMIT_NAMES = tuple(f.name for f in fields(InputLimits))
_PARSED = {
    "workspace_dir",
    "ssrf_allow_hosts",
    "plugin_mode",
    "enabled_plugin_ids",
    "input_limits",
    "context_windows",
    "mcp_stdio_allow",
    "approval_policy",
    "tenants",
}
CORE_COPIED = tuple(
    f.name for f in fields(CoreSettings) if f.name not in _PARSED and f.name in {s.name for s in SETTINGS}
)
assert set(INPUT_LIMIT_NAMES) <= {s.name for s in SETTINGS}
