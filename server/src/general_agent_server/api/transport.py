"""How the gRPC server is built from the settings: its interceptors (request context, then authentication),
channel options (message sizes, keepalive, connection age) and the port's credentials (TLS, mutual TLS)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import grpc

from general_agent_server.api.auth_interceptor import AuthInterceptor, open_prefixes
from general_agent_server.api.interceptors import RequestContextInterceptor
from general_agent_server.auth import Authenticator
from general_agent_server.config import ServerSettings, StartError
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


class ListenError(StartError):
    """The server cannot listen where the `listen` setting says: the port is taken, or the host is not this
    machine's."""


def add_port(server: grpc.aio.Server, settings: ServerSettings) -> int:
    """Binds `listen` and answers the port bound (the one picked for port 0), or raises ListenError.

    An address no socket can bind is refused before gRPC tries it, so the error is this one line and not gRPC's
    own log line too. With `reuse_port` (workers sharing the port) gRPC's bind is the only test."""
    if not settings.reuse_port:
        reason = _bind_failure(settings.listen)
        if reason is not None:
            raise ListenError(f"listen: cannot bind {settings.listen}: {reason}")
    credentials = server_credentials(settings)
    try:
        if credentials is None:
            port = server.add_insecure_port(settings.listen)
        else:
            port = server.add_secure_port(settings.listen, credentials)
    except RuntimeError:  # grpc's "Failed to bind to address", which does not say why
        port = 0
    if port == 0:
        reason = _bind_failure(settings.listen) or "gRPC could not bind it"
        raise ListenError(f"listen: cannot bind {settings.listen}: {reason}")
    return port


def _bind_failure(address: str) -> str | None:
    """Why no address `address` (HOST:PORT) resolves to can be bound, found by binding a socket to each the way
    gRPC does (SO_REUSEADDR): the system's reason ("Address already in use", "Cannot assign requested address"),
    or None when one of them binds. gRPC serves when it binds any of them (localhost's IPv4 without its IPv6)."""
    host, _, port = address.rpartition(":")
    first: str | None = None
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as error:
        return getattr(error, "strerror", None) or str(error)
    for family, kind, protocol, _, where in infos:
        try:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(where)
        except OSError as error:
            first = first or error.strerror or str(error)
        else:
            return None
    return first or "it resolves to no address"
