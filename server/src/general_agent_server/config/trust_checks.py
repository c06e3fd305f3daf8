"""Checks of the settings of config/trust.py; every error names the setting."""

from __future__ import annotations

from pathlib import Path

from general_agent_server.config.errors import ConfigError
from general_agent_server.config.table import ServerSettings

TRACING = ("off", "otlp", "console")


def host_and_port(name: str, value: str) -> str:
    """The host of HOST:PORT setting `name`, whose port must be 0 (any free one) to 65535."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"{name}: expected HOST:PORT, got {value!r}")
    if int(port) > 65535:
        raise ConfigError(f"{name}: port {port} is out of range (0-65535; 0 picks a free port)")
    return host


def check_trust(settings: ServerSettings) -> None:
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ConfigError("tls_cert_file: set both tls_cert_file and tls_key_file, or neither")
    for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        path = getattr(settings, name)
        if path and not Path(path).is_file():
            raise ConfigError(f"{name}: no such file {path}")
    if settings.tls_client_ca_file and not settings.tls_cert_file:
        raise ConfigError("tls_client_ca_file: mutual TLS needs the server's own tls_cert_file and tls_key_file")
    if settings.auth.client_certs and not settings.tls_client_ca_file:
        raise ConfigError("auth.client_certs: needs tls_client_ca_file (client certificates are verified against it)")
    for name in (
        "max_concurrent_runs",
        "max_concurrent_runs_per_tenant",
        "max_sessions_per_tenant",
        "max_connection_idle",
        "max_connection_age",
        "max_connection_age_grace",
    ):
        if getattr(settings, name) < 0:
            raise ConfigError(f"{name}: must not be negative (0: no limit)")
    for name in ("keepalive_time", "keepalive_timeout"):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{name}: must be positive")
    if settings.metrics_listen:
        host_and_port("metrics_listen", settings.metrics_listen)
    if settings.auth.enabled and settings.workspace_mode == "shared":
        raise ConfigError(
            "workspace_mode: shared puts every tenant's files in one directory; use per_session with auth"
        )
    if settings.tracing not in TRACING:
        raise ConfigError(f"tracing: expected off, otlp or console, got {settings.tracing!r}")
