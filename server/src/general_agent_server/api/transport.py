"""How the gRPC server is built from the settings: its interceptors (request context, then authentication),
channel options (message sizes, keepalive, connection age) and the port's credentials (TLS, mutual TLS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from general_agent_server.api.auth_interceptor import AuthInterceptor, open_prefixes
from general_agent_server.api.interceptors import RequestContextInterceptor
from general_agent_server.auth import Authenticator
from general_agent_server.config import ServerSettings
from general_agent_server.observability.port import Observer


def interceptors(settings: ServerSettings, observer: Observer | None = None) -> list[grpc.aio.ServerInterceptor]:
    chain: list[grpc.aio.ServerInterceptor] = [RequestContextInterceptor(observer)]
    if settings.auth.enabled:
        opened = open_prefixes(health=settings.auth_open_health, reflection=settings.auth_open_reflection)
        chain.append(AuthInterceptor(Authenticator(settings.auth), open_prefixes=opened))
    return chain


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def server_options(settings: ServerSettings) -> list[tuple[str, Any]]:
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", settings.max_receive_message_length),
        ("grpc.max_send_message_length", settings.max_receive_message_length),
        ("grpc.keepalive_time_ms", _ms(settings.keepalive_time)),
        ("grpc.keepalive_timeout_ms", _ms(settings.keepalive_timeout)),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        # A second server on a port in use fails to bind instead of silently sharing its traffic, unless the
        # processes share it on purpose (`serve --workers`).
        ("grpc.so_reuseport", 1 if settings.reuse_port else 0),
    ]
    ages = {
        "grpc.max_connection_idle_ms": settings.max_connection_idle,
        "grpc.max_connection_age_ms": settings.max_connection_age,
        "grpc.max_connection_age_grace_ms": settings.max_connection_age_grace,
    }
    options.extend((name, _ms(value)) for name, value in ages.items() if value > 0)
    return options


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """TLS when a certificate is configured; with a client CA, every client must present a certificate it
    verifies (the certificate's CN or a SAN then names the caller, [[auth.client_certs]])."""
    if not settings.tls_cert_file:
        return None
    pair = (Path(settings.tls_key_file).read_bytes(), Path(settings.tls_cert_file).read_bytes())
    ca = Path(settings.tls_client_ca_file).read_bytes() if settings.tls_client_ca_file else None
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)


def add_port(server: grpc.aio.Server, settings: ServerSettings) -> int:
    credentials = server_credentials(settings)
    if credentials is None:
        return server.add_insecure_port(settings.listen)
    return server.add_secure_port(settings.listen, credentials)
