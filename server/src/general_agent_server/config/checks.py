"""Checks of the loaded settings; every error names the setting."""

from __future__ import annotations

from urllib.parse import urlsplit

from general_agent_server.config.errors import ConfigError
from general_agent_server.config.table import INPUT_LIMIT_NAMES, ServerSettings
from general_agent_server.config.trust_checks import check_trust, host_and_port
from general_agent_server.hooks.plugins import PluginMode
from general_agent_server.memory.settings import BACKENDS, MAX_BUDGET_CHARS, MAX_TOP_K
from general_agent_server.model.port import HTTP_CLIENTS
from general_agent_server.tools.shell.command_user import CommandUserError, command_user

__all__ = ["ConfigError", "validate"]


def validate(settings: ServerSettings) -> None:
    host = host_and_port("listen", settings.listen)
    loopback = host in ("127.0.0.1", "localhost", "[::1]", "::1") or host.startswith("127.")
    if not loopback and not settings.insecure_listen and not settings.auth.enabled:
        raise ConfigError(
            f"listen: {settings.listen} is not a loopback address and no auth is configured "
            "([[auth.tokens]] or [[auth.client_certs]], docs/security.md); pass --insecure-listen to allow it"
        )
    check_trust(settings)
    _check_store(settings.store)
    if settings.log_format not in ("json", "text"):
        raise ConfigError(f"log_format: expected json or text, got {settings.log_format!r}")
    if settings.model_http_client not in HTTP_CLIENTS:
        raise ConfigError(
            f"model_http_client: expected {' or '.join(HTTP_CLIENTS)}, got {settings.model_http_client!r}"
        )
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
        "replica_poll_seconds",
        "max_history_page_bytes",
    ):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{name}: must be positive")
    for name in INPUT_LIMIT_NAMES:
        if getattr(settings, name) <= 0:
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
    for item in filter(str.strip, settings.context_windows.split(",")):
        key, sep, tokens = item.partition("=")
        if not sep or not key.strip() or not tokens.strip().isdigit() or int(tokens) <= 0:
            raise ConfigError(f"context_windows: expected key=tokens with a positive number, got {item.strip()!r}")
    for name in (
        "compaction_keep_recent_turns",
        "compaction_summary_max_tokens",
        "compaction_timeout",
        "mcp_connect_timeout",
        "mcp_call_timeout",
        "mcp_idle_timeout",
        "approval_timeout",
    ):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{name}: must be positive")
    _check_memory(settings)
    for tenant, profile_id in settings.tenant_default_profiles.items():
        if profile_id not in settings.auth_profiles:
            raise ConfigError(f"tenant_default_profiles.{tenant}: unknown profile {profile_id!r}")


def _check_memory(settings: ServerSettings) -> None:
    if settings.memory_backend not in BACKENDS:
        raise ConfigError(f"memory_backend: expected local, everme or off, got {settings.memory_backend!r}")
    if not 1 <= settings.memory_recall_top_k <= MAX_TOP_K:
        raise ConfigError(f"memory_recall_top_k: must be between 1 and {MAX_TOP_K}")
    if not 200 <= settings.memory_recall_budget_chars <= MAX_BUDGET_CHARS:
        raise ConfigError(f"memory_recall_budget_chars: must be between 200 and {MAX_BUDGET_CHARS}")
    if settings.memory_recall_timeout <= 0:
        raise ConfigError("memory_recall_timeout: must be positive")
    if settings.memory_backend == "everme" and not settings.memory_everme_user_id:
        raise ConfigError("memory_everme_user_id: required with memory_backend = everme (whose token it is)")


def _check_store(store: str) -> None:
    from general_agent_server.store.postgres.dsn import DsnError, parse_store_url

    if not store:
        return
    try:
        parse_store_url(store)
    except DsnError as exc:
        raise ConfigError(str(exc)) from None
