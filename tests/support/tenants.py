"""Servers with bearer tokens for the auth and tenancy tests: a TOML file with `[[auth.tokens]]` entries, and
stubs whose every call carries one token (or none)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from general_agent.v1 import agent_service_pb2_grpc
from tests.support.rpc import Stub

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"


def token_config(path: Path, extra: str = "") -> Path:
    """Tenant `alice` (token from the environment: ALICE_TOKEN), tenant `bob` (its SHA-256 in the file), and an
    admin of tenant `ops` (token from a file)."""
    admin_file = path.parent / "admin.token"
    admin_file.write_text(ADMIN + "\n")
    bob_digest = hashlib.sha256(BOB.encode()).hexdigest()
    path.write_text(
        "[[auth.tokens]]\n"
        'name = "alice-service"\ntenant = "alice"\nrole = "tenant"\ntoken_env = "ALICE_TOKEN"\n\n'
        "[[auth.tokens]]\n"
        f'name = "bob-service"\ntenant = "bob"\nrole = "tenant"\ntoken_sha256 = "{bob_digest}"\n\n'
        "[[auth.tokens]]\n"
        f'name = "operator"\ntenant = "ops"\nrole = "admin"\ntoken_file = "{admin_file}"\n' + extra
    )
    return path


def auth_env(tmp_path: Path, extra: str = "", **settings: str) -> dict[str, str]:
    config = token_config(tmp_path / "auth.toml", extra)
    env = {"GENERAL_AGENT_CONFIG": str(config), "ALICE_TOKEN": ALICE}
    env.update({f"GENERAL_AGENT_{k.upper()}": v for k, v in settings.items()})
    return env


class _AddMetadata:
    """Adds fixed metadata (a token, an x-tenant) to every call of a channel."""

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = tuple(metadata)

    def _details(self, details: Any) -> Any:
        return details._replace(metadata=(*(details.metadata or ()), *self._metadata))


# grpc.aio files an interceptor under its first matching kind only: one class per kind.
class _Unary(_AddMetadata, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _ServerStream(_AddMetadata, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _Bidi(_AddMetadata, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return await continuation(self._details(details), request_iterator)


class _Blocking(
    _AddMetadata,
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """The same for a blocking channel, whose interceptors may serve every kind at once."""

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(details), request_iterator)


def blocking_channel_as(address: str, token: str | None, tenant: str = "") -> grpc.Channel:
    """A blocking channel whose every call carries `token` (and `x-tenant`); the caller closes it."""
    return grpc.intercept_channel(grpc.insecure_channel(address), _Blocking(metadata_for(token, tenant)))


def metadata_for(token: str | None, tenant: str = "") -> list[tuple[str, str]]:
    metadata = [("authorization", f"Bearer {token}")] if token is not None else []
    return [*metadata, *([("x-tenant", tenant)] if tenant else [])]


@asynccontextmanager
async def channel_as(address: str, token: str | None, tenant: str = "") -> AsyncIterator[grpc.aio.Channel]:
    metadata = metadata_for(token, tenant)
    interceptors: list[Any] = [_Unary(metadata), _ServerStream(metadata), _Bidi(metadata)]
    async with grpc.aio.insecure_channel(address, interceptors=interceptors) as channel:
        yield channel


@asynccontextmanager
async def stub_as(address: str, token: str | None, tenant: str = "") -> AsyncIterator[Stub]:
    async with channel_as(address, token, tenant) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel)
