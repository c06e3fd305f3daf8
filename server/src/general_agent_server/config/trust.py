"""The settings of authentication, TLS, limits, load shedding and observability (docs/security.md,
docs/observability.md): a base of ServerSettings, so they are settings like any other (flags, environment,
TOML keys, docs/configuration.md) and listed after the others. The `[auth]` and `[tenants.<name>]` tables come
from the TOML file only (config/loading.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from general_agent_server.auth.config import AuthConfig, TenantPolicy
from general_agent_server.config.fields import setting


@dataclass(frozen=True, kw_only=True)
class TrustSettings:
    auth_open_health: bool = setting(True, "Health checks need no credentials when auth is configured.")
    auth_open_reflection: bool = setting(True, "Server reflection needs no credentials when auth is configured.")
    tls_cert_file: str = setting("", "PEM certificate chain of the server; with tls_key_file, the server speaks TLS.")
    tls_key_file: str = setting("", "PEM private key of tls_cert_file.")
    tls_client_ca_file: str = setting(
        "",
        "PEM CA bundle for mutual TLS: every connection must present a client certificate it verifies "
        "([[auth.client_certs]] maps them to tenants).",
    )
    max_concurrent_runs: int = setting(256, "Runs executing at once in this server; 0: no limit.")
    max_concurrent_runs_per_tenant: int = setting(
        64, "Runs executing at once per tenant ([tenants.<name>] max_concurrent_runs overrides); 0: no limit."
    )
    max_sessions_per_tenant: int = setting(
        100_000, "Sessions one tenant may have ([tenants.<name>] max_sessions overrides); 0: no limit."
    )
    keepalive_time: float = setting(60.0, "Seconds between the server's keepalive pings on an idle connection.")
    keepalive_timeout: float = setting(20.0, "Seconds the server waits for a keepalive ping's answer.")
    max_connection_idle: float = setting(0.0, "Seconds before an idle connection is closed; 0: never.")
    max_connection_age: float = setting(0.0, "Seconds before a connection is asked to go away (GOAWAY); 0: never.")
    max_connection_age_grace: float = setting(
        0.0, "Seconds calls of a connection past max_connection_age may still take; 0: unbounded."
    )
    metrics_listen: str = setting("", "HOST:PORT of the Prometheus /metrics endpoint; empty: no metrics server.")
    tracing: str = setting(
        "off",
        "OpenTelemetry tracing: off, otlp (OTLP/gRPC exporter; OTEL_EXPORTER_OTLP_* variables) or console.",
    )

    # From the TOML file only:
    auth: AuthConfig = field(default_factory=AuthConfig, repr=False)
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)
