"""Server settings: one table drives the flags, the GENERAL_AGENT_* environment, the TOML file and the
README's configuration table. Precedence: flag > environment > TOML file > default.

Secrets are never taken from flags: the API key comes from ANTHROPIC_API_KEY or a file, profile keys from
a named environment variable or a file."""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from general_agent_server.domain.errors import ServiceError
from general_agent_server.domain.session import HostedToolDefinition
from general_agent_server.domain.validation import InputLimits, check_hosted_tools
from general_agent_server.hooks.plugins import PluginMode, normalise_plugin_ids
from general_agent_server.model.credentials import AuthProfile
from general_agent_server.security.redaction import register_secret
from general_agent_server.sessions.settings import CoreSettings
from general_agent_server.tools.runtime import ToolLimits
from general_agent_server.tools.shell.command_user import CommandUserError, command_user

MIB = 1024 * 1024


class ConfigError(Exception):
    """The configuration is invalid; the message names the setting."""


@dataclass(frozen=True, kw_only=True)
class Setting:
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


INPUT_LIMIT_HELP = {
    "max_system_prompt_bytes": "Largest system prompt of a session, bytes (UTF-8).",
    "max_hosted_tools": "Hosted tools one session may define.",
    "max_hosted_tool_schema_bytes": "Largest input schema of one hosted tool, bytes of compact JSON.",
    "max_hosted_tool_description_bytes": "Largest description of one hosted tool, bytes.",
    "max_labels": "Labels one session may carry.",
    "max_label_key_chars": "Longest label key, characters.",
    "max_label_value_chars": "Longest label value, characters.",
    "max_allowed_tools": "Entries of a session's allowed_tools.",
    "max_session_key_chars": "Longest session_key, characters.",
    "max_hook_registrations": "Hook registrations per scope (one session, or a tenant's server-wide ones).",
    "max_hook_tls_pem_bytes": "Largest PEM (CA, client certificate or key) of a hook target's TLS, bytes.",
}

SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="listen",
        kind=str,
        default="127.0.0.1:50051",
        help="HOST:PORT to listen on; port 0 picks a free port.",
    ),
    Setting(name="ready_file", kind=str, default="", help="Written with {address, pid} once health is SERVING."),
    Setting(
        name="state_dir",
        kind=str,
        default=".general-agent/state",
        help="SQLite state and transcript exports.",
    ),
    Setting(name="workspace_dir", kind=str, default=".general-agent/workspace", help="Root of session workspaces."),
    Setting(
        name="default_model",
        kind=str,
        default="anthropic/claude-sonnet-4-6",
        help="Model ref for sessions without one.",
    ),
    Setting(name="max_tokens_cap", kind=int, default=64_000, help="Upper bound on max_tokens of any model call."),
    Setting(
        name="insecure_listen",
        kind=bool,
        default=False,
        help="Allow a non-loopback listen address without auth tokens.",
    ),
    Setting(name="shutdown_grace", kind=float, default=10.0, help="Seconds running runs get at shutdown."),
    Setting(name="log_level", kind=str, default="INFO", help="DEBUG, INFO, WARNING or ERROR."),
    Setting(name="log_format", kind=str, default="json", help="json (structured) or text."),
    Setting(name="model_request_timeout", kind=float, default=600.0, help="Seconds per model request."),
    Setting(
        name="model_max_retries",
        kind=int,
        default=2,
        help="Retries of a model call: 408/409/429/5xx/529 and network errors (by the SDK), and streams that "
        "break after the response started (by the run loop).",
    ),
    Setting(
        name="model_retry_backoff",
        kind=float,
        default=0.5,
        help="Seconds before the first retry of a model stream that broke mid-way (doubled each retry, at most 8).",
    ),
    Setting(
        name="max_receive_message_length",
        kind=int,
        default=32 * MIB,
        help="Largest gRPC message accepted, bytes.",
    ),
    Setting(name="max_image_bytes", kind=int, default=5 * MIB, help="Largest image part, bytes."),
    Setting(name="max_message_bytes", kind=int, default=20 * MIB, help="Largest user message, bytes."),
    # Bounds on what requests can make the server keep per session; defaults from InputLimits.
    *(
        Setting(name=name, kind=int, default=getattr(InputLimits(), name), help=text)
        for name, text in INPUT_LIMIT_HELP.items()
    ),
    Setting(
        name="subscriber_buffer",
        kind=int,
        default=4096,
        help="Events buffered per stream before SLOW_CONSUMER.",
    ),
    Setting(
        name="store_flush_interval_ms",
        kind=float,
        default=20.0,
        help="Group-commit window for buffered events.",
    ),
    Setting(name="replica_id", kind=str, default="local", help="Lease owner id of this server process."),
    Setting(
        name="lease_ttl_seconds",
        kind=float,
        default=60.0,
        help="Seconds a session lease lasts unrenewed (renewed every third of it while the session is loaded).",
    ),
    Setting(
        name="max_history_page_bytes",
        kind=int,
        default=4 * MIB,
        help="Bytes of transcript entries one GetSessionHistory page carries.",
    ),
    Setting(
        name="max_idle_sessions",
        kind=int,
        default=1000,
        help="Idle sessions kept loaded in memory (least recently used evicted first).",
    ),
    Setting(
        name="max_idle_session_bytes",
        kind=int,
        default=256 * MIB,
        help="Estimated bytes of idle loaded sessions (history, system prompt, tool schemas); LRU evicted beyond.",
    ),
    Setting(name="max_model_calls_per_run", kind=int, default=50, help="Model calls one run may make."),
    Setting(name="max_tool_calls_per_run", kind=int, default=200, help="Tool calls one run may make."),
    Setting(name="run_deadline", kind=float, default=1800.0, help="Seconds one run may take (suspensions excluded)."),
    Setting(
        name="hosted_call_timeout",
        kind=float,
        default=86_400.0,
        help="Default seconds a host has to answer a hosted call.",
    ),
    Setting(
        name="hosted_call_timeout_max", kind=float, default=604_800.0, help="Upper bound on any hosted call deadline."
    ),
    Setting(name="max_queued_turns", kind=int, default=8, help="ENQUEUE turns waiting per session."),
    Setting(
        name="enqueue_timeout",
        kind=float,
        default=60.0,
        help="Seconds an ENQUEUE turn waits before it fails SESSION_BUSY.",
    ),
    Setting(name="event_retention_count", kind=int, default=10_000, help="Events kept per session (newest)."),
    Setting(name="event_retention_days", kind=float, default=7.0, help="Days events are kept per session."),
    Setting(
        name="event_log",
        kind=bool,
        default=False,
        help="Also write the raw event log JSONL (query_started + every event) under <state_dir>/events.",
    ),
    Setting(name="tool_timeout", kind=float, default=120.0, help="Default seconds a local tool may run."),
    Setting(name="max_tool_output_chars", kind=int, default=100_000, help="Tool output cap (text), with a notice."),
    Setting(
        name="workspace_mode",
        kind=str,
        default="per_session",
        help="per_session (<workspace_dir>/<tenant>/<session_id>) or shared (<workspace_dir>, one tenant only).",
    ),
    Setting(name="exec_enabled", kind=bool, default=True, help="Offer the exec and process tools (CODING mode)."),
    Setting(name="exec_timeout", kind=float, default=120.0, help="Default seconds an exec command may run."),
    Setting(name="exec_timeout_max", kind=float, default=1800.0, help="Largest timeout an exec call may ask for."),
    Setting(
        name="exec_env_allow",
        kind=str,
        default="PATH,HOME,LANG,LC_ALL,LC_CTYPE,TERM,TZ,USER,LOGNAME,SHELL,TMPDIR",
        help="Comma-separated environment variables exec commands inherit; nothing else reaches them.",
    ),
    Setting(
        name="exec_user",
        kind=str,
        default="",
        help="User (name or uid) exec commands run as when the server runs as root; empty: nobody. `root` lets "
        "commands read the server's memory and files. A server run as another user runs them as itself.",
    ),
    Setting(
        name="ssrf_allow_hosts",
        kind=str,
        default="",
        help=(
            "Comma-separated hosts (names or IPs) exempt from the SSRF guard"
            " (web_fetch; tenant-role callers' hook targets and MCP URLs)."
        ),
    ),
    Setting(name="web_fetch_cache_ttl_minutes", kind=float, default=15.0, help="web_fetch cache TTL; <=0 disables."),
    Setting(name="web_fetch_timeout_seconds", kind=float, default=30.0, help="web_fetch timeout per request."),
    Setting(name="web_fetch_max_chars_cap", kind=int, default=50_000, help="Upper bound on web_fetch maxChars."),
    Setting(name="web_fetch_max_response_bytes", kind=int, default=2_000_000, help="Bytes of a body web_fetch reads."),
    Setting(name="web_fetch_max_redirects", kind=int, default=3, help="Redirects web_fetch follows."),
    Setting(
        name="web_fetch_user_agent",
        kind=str,
        default="Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
        help="User-Agent of web_fetch requests.",
    ),
    Setting(name="web_fetch_readability", kind=bool, default=True, help="Extract readable text from HTML."),
    Setting(
        name="web_fetch_firecrawl_enabled",
        kind=bool,
        default=True,
        help="Fall back to Firecrawl when a fetch fails or finds no readable text; needs FIRECRAWL_API_KEY.",
    ),
    Setting(
        name="web_fetch_firecrawl_base_url",
        kind=str,
        default="https://api.firecrawl.dev",
        help="Firecrawl API base; a bare host gets /v2/scrape, any other path is used as is.",
    ),
    Setting(
        name="web_fetch_firecrawl_only_main_content",
        kind=bool,
        default=True,
        help="Ask Firecrawl for the main content only.",
    ),
    Setting(
        name="web_fetch_firecrawl_max_age_ms",
        kind=int,
        default=172_800_000,
        help="Oldest Firecrawl cached copy accepted, in milliseconds.",
    ),
    Setting(
        name="web_fetch_firecrawl_timeout_seconds",
        kind=float,
        default=0.0,
        help="Firecrawl request timeout; 0 means web_fetch_timeout_seconds.",
    ),
    Setting(
        name="web_search_duckduckgo_url",
        kind=str,
        default="https://html.duckduckgo.com/html",
        help="DuckDuckGo HTML endpoint (keyless web_search).",
    ),
    Setting(
        name="web_search_brave_url",
        kind=str,
        default="https://api.search.brave.com/res/v1/web/search",
        help="Brave Search endpoint (used when BRAVE_API_KEY or BRAVE_SEARCH_API_KEY is set).",
    ),
    Setting(name="web_search_cache_ttl_minutes", kind=float, default=15.0, help="web_search cache TTL; <=0 disables."),
    Setting(name="checkpoint_max_count", kind=int, default=100, help="File checkpoints kept per session (newest)."),
    Setting(
        name="checkpoint_max_bytes",
        kind=int,
        default=64 * MIB,
        help="Bytes of prior file contents kept in checkpoints per session (oldest dropped first).",
    ),
    Setting(
        name="hook_max_payload_bytes",
        kind=int,
        default=MIB,
        help="Bytes of message history one remote hook call carries (oldest dropped first, `truncated` set).",
    ),
    Setting(
        name="plugin_mode",
        kind=str,
        default="ALLOWLISTED",
        help="In-process plugins: DISABLED, ALLOWLISTED (only enabled_plugin_ids) or FULL_EMBEDDED (all installed).",
    ),
    Setting(
        name="enabled_plugin_ids",
        kind=str,
        default="",
        help="Comma-separated plugin ids (entry points of group general_agent.plugins) to load when ALLOWLISTED.",
    ),
    Setting(
        name="anthropic_api_key_file",
        kind=str,
        default="",
        help="File holding the default profile's API key (else ANTHROPIC_API_KEY).",
    ),
)


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    listen: str = "127.0.0.1:50051"
    ready_file: str = ""
    state_dir: str = ".general-agent/state"
    workspace_dir: str = ".general-agent/workspace"
    default_model: str = "anthropic/claude-sonnet-4-6"
    max_tokens_cap: int = 64_000
    insecure_listen: bool = False
    shutdown_grace: float = 10.0
    log_level: str = "INFO"
    log_format: str = "json"
    model_request_timeout: float = 600.0
    model_max_retries: int = 2
    model_retry_backoff: float = 0.5
    max_receive_message_length: int = 32 * MIB
    max_image_bytes: int = 5 * MIB
    max_message_bytes: int = 20 * MIB
    subscriber_buffer: int = 4096
    store_flush_interval_ms: float = 20.0
    replica_id: str = "local"
    lease_ttl_seconds: float = 60.0
    max_history_page_bytes: int = 4 * MIB
    max_idle_sessions: int = 1000
    max_idle_session_bytes: int = 256 * MIB
    max_model_calls_per_run: int = 50
    max_tool_calls_per_run: int = 200
    run_deadline: float = 1800.0
    hosted_call_timeout: float = 86_400.0
    hosted_call_timeout_max: float = 604_800.0
    max_queued_turns: int = 8
    enqueue_timeout: float = 60.0
    tool_timeout: float = 120.0
    event_retention_count: int = 10_000
    event_retention_days: float = 7.0
    event_log: bool = False
    max_tool_output_chars: int = 100_000
    workspace_mode: str = "per_session"
    exec_enabled: bool = True
    exec_timeout: float = 120.0
    exec_timeout_max: float = 1800.0
    exec_env_allow: str = "PATH,HOME,LANG,LC_ALL,LC_CTYPE,TERM,TZ,USER,LOGNAME,SHELL,TMPDIR"
    exec_user: str = ""
    ssrf_allow_hosts: str = ""
    web_fetch_cache_ttl_minutes: float = 15.0
    web_fetch_timeout_seconds: float = 30.0
    web_fetch_max_chars_cap: int = 50_000
    web_fetch_max_response_bytes: int = 2_000_000
    web_fetch_max_redirects: int = 3
    web_fetch_user_agent: str = (
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
    )
    web_fetch_readability: bool = True
    web_fetch_firecrawl_enabled: bool = True
    web_fetch_firecrawl_base_url: str = "https://api.firecrawl.dev"
    web_fetch_firecrawl_only_main_content: bool = True
    web_fetch_firecrawl_max_age_ms: int = 172_800_000
    web_fetch_firecrawl_timeout_seconds: float = 0.0
    web_search_duckduckgo_url: str = "https://html.duckduckgo.com/html"
    web_search_brave_url: str = "https://api.search.brave.com/res/v1/web/search"
    web_search_cache_ttl_minutes: float = 15.0
    checkpoint_max_count: int = 100
    checkpoint_max_bytes: int = 64 * MIB
    hook_max_payload_bytes: int = MIB
    plugin_mode: str = "ALLOWLISTED"
    enabled_plugin_ids: str = ""
    anthropic_api_key_file: str = ""
    # From the environment / TOML only (never flags):
    default_profile: AuthProfile | None = field(default=None, repr=False)
    auth_profiles: Mapping[str, AuthProfile] = field(default_factory=dict, repr=False)
    tenant_default_profiles: Mapping[str, str] = field(default_factory=dict)
    hosted_tools: tuple[HostedToolDefinition, ...] = ()
    # The max_* settings of INPUT_LIMIT_HELP, gathered.
    input_limits: InputLimits = field(default_factory=InputLimits)
    brave_api_key: str = field(default="", repr=False)
    firecrawl_api_key: str = field(default="", repr=False)

    def core(self) -> CoreSettings:
        return CoreSettings(
            default_model_ref=self.default_model,
            max_tokens_cap=self.max_tokens_cap,
            model_stream_retries=self.model_max_retries,
            model_retry_backoff_seconds=self.model_retry_backoff,
            replica_id=self.replica_id,
            lease_ttl_seconds=self.lease_ttl_seconds,
            subscriber_buffer=self.subscriber_buffer,
            max_image_bytes=self.max_image_bytes,
            max_message_bytes=self.max_message_bytes,
            max_history_page_bytes=self.max_history_page_bytes,
            max_idle_actors=self.max_idle_sessions,
            max_idle_actor_bytes=self.max_idle_session_bytes,
            shutdown_grace_seconds=self.shutdown_grace,
            workspace_root=Path(self.workspace_dir).resolve(),
            shared_workspace=self.workspace_mode == "shared",
            max_model_calls_per_run=self.max_model_calls_per_run,
            max_tool_calls_per_run=self.max_tool_calls_per_run,
            run_deadline_seconds=self.run_deadline,
            hosted_call_timeout_seconds=self.hosted_call_timeout,
            hosted_call_timeout_max_seconds=self.hosted_call_timeout_max,
            max_queued_turns=self.max_queued_turns,
            enqueue_timeout_seconds=self.enqueue_timeout,
            event_retention_count=self.event_retention_count,
            event_retention_seconds=self.event_retention_days * 86_400,
            ssrf_allow_hosts=self.host_list(self.ssrf_allow_hosts),
            checkpoint_max_count=self.checkpoint_max_count,
            checkpoint_max_bytes=self.checkpoint_max_bytes,
            hook_max_payload_bytes=self.hook_max_payload_bytes,
            plugin_mode=PluginMode(self.plugin_mode.upper().replace("-", "_")),
            enabled_plugin_ids=normalise_plugin_ids(self.enabled_plugin_ids.split(",")),
            input_limits=self.input_limits,
        )

    def host_list(self, value: str) -> frozenset[str]:
        """A comma-separated setting as a set (trimmed, lower-cased, empties dropped)."""
        return frozenset(item.strip().lower() for item in value.split(",") if item.strip())

    def tool_limits(self) -> ToolLimits:
        return ToolLimits(max_output_chars=self.max_tool_output_chars, default_timeout_seconds=self.tool_timeout)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML settings file (GENERAL_AGENT_CONFIG).")
    for setting in SETTINGS:
        if setting.name == "anthropic_api_key_file":
            continue  # a path, but kept off the command line with the other secrets' settings
        if setting.kind is bool:
            # `--no-NAME` turns off a setting that defaults to true (or that the environment or file set).
            parser.add_argument(setting.flag, action=argparse.BooleanOptionalAction, default=None, help=setting.help)
        else:
            parser.add_argument(setting.flag, default=None, help=f"{setting.help} (default {setting.default!r})")


def _coerce(setting: Setting, value: Any, source: str) -> Any:
    try:
        if setting.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(value)
        return setting.kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{setting.name} ({source}): invalid {setting.kind.__name__} {value!r}") from None


def load_settings(args: argparse.Namespace | None, environ: Mapping[str, str]) -> ServerSettings:
    config_path = (getattr(args, "config", None) if args else None) or environ.get("GENERAL_AGENT_CONFIG", "")
    file_values: dict[str, Any] = {}
    if config_path:
        try:
            file_values = tomllib.loads(Path(config_path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {config_path}: {exc}") from None
    known = {s.name for s in SETTINGS} | {"auth_profiles", "tenant_default_profiles", "hosted_tools"}
    unknown = sorted(set(file_values) - known)
    if unknown:
        raise ConfigError(f"config file {config_path}: unknown setting(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        value: Any = setting.default
        if setting.name in file_values:
            value = _coerce(setting, file_values[setting.name], f"config file {config_path}")
        if setting.env in environ:
            value = _coerce(setting, environ[setting.env], setting.env)
        flag_value = getattr(args, setting.name, None) if args else None
        if flag_value is not None:
            value = _coerce(setting, flag_value, setting.flag)
        values[setting.name] = value
    limits = InputLimits(**{name: values.pop(name) for name in INPUT_LIMIT_HELP})
    settings = ServerSettings(
        **values,
        input_limits=limits,
        default_profile=_default_profile(values["anthropic_api_key_file"], environ),
        auth_profiles=_profiles(file_values.get("auth_profiles", {}), environ),
        tenant_default_profiles=dict(file_values.get("tenant_default_profiles", {})),
        hosted_tools=_hosted_tools(file_values.get("hosted_tools", []), limits),
        brave_api_key=register_secret(environ.get("BRAVE_API_KEY") or environ.get("BRAVE_SEARCH_API_KEY") or ""),
        firecrawl_api_key=register_secret(environ.get("FIRECRAWL_API_KEY", "").strip()),
    )
    _validate(settings)
    return settings


def _read_secret_file(path: str, what: str) -> str:
    try:
        return register_secret(Path(path).read_text().strip())
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None


def _check_base_url(url: str | None, what: str) -> str | None:
    if not url:
        return None
    if url.rstrip("/").endswith("/v1"):
        raise ConfigError(f"{what}: base URL must not end in /v1 (the client appends /v1/messages): {url}")
    return url


def _default_profile(key_file: str, environ: Mapping[str, str]) -> AuthProfile:
    key = (
        _read_secret_file(key_file, "anthropic_api_key_file")
        if key_file
        else register_secret(environ.get("ANTHROPIC_API_KEY", ""))
    )
    return AuthProfile(
        profile_id="default",
        api_key=key,
        base_url=_check_base_url(environ.get("ANTHROPIC_BASE_URL"), "ANTHROPIC_BASE_URL"),
    )


def _profiles(raw: Any, environ: Mapping[str, str]) -> dict[str, AuthProfile]:
    if not isinstance(raw, dict):
        raise ConfigError("auth_profiles: must be a table of profiles")
    profiles: dict[str, AuthProfile] = {}
    for profile_id, spec in raw.items():
        where = f"auth_profiles.{profile_id}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: must be a table")
        if "api_key" in spec:
            raise ConfigError(f"{where}: put the key in an environment variable (api_key_env) or a file (api_key_file)")
        key = ""
        if spec.get("api_key_env"):
            key = register_secret(environ.get(str(spec["api_key_env"]), ""))
        elif spec.get("api_key_file"):
            key = _read_secret_file(str(spec["api_key_file"]), f"{where}.api_key_file")
        profiles[profile_id] = AuthProfile(
            profile_id=profile_id,
            api_key=key,
            base_url=_check_base_url(spec.get("base_url"), f"{where}.base_url"),
            allowed_tenants=frozenset(spec.get("allowed_tenants", ())),
        )
    return profiles


def _hosted_tools(raw: Any, limits: InputLimits) -> tuple[HostedToolDefinition, ...]:
    """Server-wide hosted tools from the TOML file: [[hosted_tools]] name, description, input_schema,
    timeout_seconds."""
    if not isinstance(raw, list):
        raise ConfigError("hosted_tools: must be an array of tables")
    tools = []
    for index, spec in enumerate(raw):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ConfigError(f"hosted_tools[{index}]: needs a name")
        timeout = spec.get("timeout_seconds")
        tools.append(
            HostedToolDefinition(
                name=spec["name"],
                description=str(spec.get("description", "")),
                input_schema=spec.get("input_schema", {"type": "object", "properties": {}}),
                timeout_seconds=float(timeout) if timeout is not None else None,
            )
        )
    try:
        check_hosted_tools(tools, field="hosted_tools", limits=limits)
    except ServiceError as exc:
        raise ConfigError(exc.message) from None
    return tuple(tools)


def _validate(settings: ServerSettings) -> None:
    host, sep, port = settings.listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"listen: expected HOST:PORT, got {settings.listen!r}")
    loopback = host in ("127.0.0.1", "localhost", "[::1]", "::1") or host.startswith("127.")
    if not loopback and not settings.insecure_listen:
        raise ConfigError(
            f"listen: {settings.listen} is not a loopback address and no auth is configured; "
            "pass --insecure-listen to allow it"
        )
    if settings.log_format not in ("json", "text"):
        raise ConfigError(f"log_format: expected json or text, got {settings.log_format!r}")
    for name in (
        "max_tokens_cap",
        "max_receive_message_length",
        "max_image_bytes",
        "max_message_bytes",
        "subscriber_buffer",
        "exec_timeout",
        "exec_timeout_max",
        "web_fetch_timeout_seconds",
        "web_fetch_max_chars_cap",
        "web_fetch_max_response_bytes",
        "checkpoint_max_count",
        "checkpoint_max_bytes",
        "hook_max_payload_bytes",
        "lease_ttl_seconds",
        "max_history_page_bytes",
    ):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{name}: must be positive")
    for name in INPUT_LIMIT_HELP:
        if getattr(settings.input_limits, name) <= 0:
            raise ConfigError(f"{name}: must be positive")
    if settings.plugin_mode.upper().replace("-", "_") not in PluginMode.__members__:
        raise ConfigError(f"plugin_mode: expected DISABLED, ALLOWLISTED or FULL_EMBEDDED, got {settings.plugin_mode!r}")
    if settings.workspace_mode not in ("per_session", "shared"):
        raise ConfigError(f"workspace_mode: expected per_session or shared, got {settings.workspace_mode!r}")
    if settings.exec_timeout > settings.exec_timeout_max:
        raise ConfigError("exec_timeout: must not exceed exec_timeout_max")
    try:
        command_user(settings.exec_user)
    except CommandUserError as exc:
        raise ConfigError(str(exc)) from None
    for name in ("web_fetch_max_redirects", "max_idle_sessions", "max_idle_session_bytes"):
        if getattr(settings, name) < 0:
            raise ConfigError(f"{name}: must not be negative")
    for name in ("web_fetch_firecrawl_max_age_ms", "web_fetch_firecrawl_timeout_seconds"):
        if getattr(settings, name) < 0:
            raise ConfigError(f"{name}: must not be negative")
    if urlsplit(settings.web_fetch_firecrawl_base_url).scheme not in ("http", "https"):
        raise ConfigError(
            f"web_fetch_firecrawl_base_url: expected an http(s) URL, got {settings.web_fetch_firecrawl_base_url!r}"
        )
    for tenant, profile_id in settings.tenant_default_profiles.items():
        if profile_id not in settings.auth_profiles:
            raise ConfigError(f"tenant_default_profiles.{tenant}: unknown profile {profile_id!r}")


def settings_table_markdown() -> str:
    """The README's configuration table."""
    rows = ["| setting | flag | environment | default | meaning |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        flag = "—" if s.name == "anthropic_api_key_file" else s.flags
        rows.append(f"| `{s.name}` | {flag} | `{s.env}` | `{s.default!r}` | {s.help} |")
    return "\n".join(rows)


assert {f.name for f in fields(ServerSettings)} | set(INPUT_LIMIT_HELP) >= {s.name for s in SETTINGS}
assert set(INPUT_LIMIT_HELP) == {f.name for f in fields(InputLimits)}
