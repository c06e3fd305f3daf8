"""Who is calling (docs/security.md): a bearer token in `authorization: Bearer <token>`, else a client
certificate mapped by its common name or a subject alternative name. Tokens are compared as SHA-256 digests
with hmac.compare_digest against every entry, so neither the answer nor its timing tells whether a token
exists. An `admin` acts on another tenant by naming it in `x-tenant`; a `tenant` caller may name only its own."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from general_agent_server.auth.config import TENANT_NAME, AuthConfig, token_digest
from general_agent_server.domain.context import CallerRole
from general_agent_server.domain.errors import ErrorCode, ServiceError, invalid_argument
from general_agent_server.domain.session import DEFAULT_TENANT

TENANT_HEADER = "x-tenant"
_MAX_TOKEN_CHARS = 4096


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """An authenticated caller: its tenant for this call, its role, and the entry's name (for logs)."""

    tenant: str
    role: CallerRole
    principal: str


OPERATOR = Caller(tenant=DEFAULT_TENANT, role=CallerRole.ADMIN, principal="")


def unauthenticated() -> ServiceError:
    # One message for a missing, malformed, unknown or revoked token: no hint which.
    return ServiceError(
        ErrorCode.UNAUTHENTICATED, "UNAUTHENTICATED", "missing or invalid credentials (authorization: Bearer <token>)"
    )


class Authenticator:
    def __init__(self, config: AuthConfig) -> None:
        self._tokens = config.tokens
        self._certs = {entry.subject: entry for entry in config.client_certs}

    @property
    def enabled(self) -> bool:
        return bool(self._tokens or self._certs)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]], peer_names: Sequence[str] = ()) -> Caller:
        """The caller of one RPC; raises UNAUTHENTICATED (or PERMISSION_DENIED for a tenant naming another)."""
        if not self.enabled:
            return OPERATOR
        authorization: list[str] = []
        tenant_header: list[str] = []
        for key, value in metadata:
            if key == "authorization":
                authorization.append(value if isinstance(value, str) else "")
            elif key == TENANT_HEADER:
                tenant_header.append(value if isinstance(value, str) else "")
        caller = self._by_token(authorization) if authorization else self._by_certificate(peer_names)
        return _acting_as(caller, tenant_header)

    def _by_token(self, values: list[str]) -> Caller:
        if len(values) != 1:
            raise unauthenticated()
        scheme, _, token = values[0].strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > _MAX_TOKEN_CHARS:
            raise unauthenticated()
        digest = token_digest(token)
        found = None
        for entry in self._tokens:  # every entry, no early exit
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        if found is None:
            raise unauthenticated()
        return Caller(tenant=found.tenant, role=found.role, principal=found.name)

    def _by_certificate(self, peer_names: Sequence[str]) -> Caller:
        for name in peer_names:
            entry = self._certs.get(name)
            if entry is not None:
                return Caller(tenant=entry.tenant, role=entry.role, principal=f"cert:{entry.subject}")
        raise unauthenticated()


def _acting_as(caller: Caller, values: list[str]) -> Caller:
    if not values:
        return caller
    if len(values) != 1 or not TENANT_NAME.match(values[0]):
        raise invalid_argument(TENANT_HEADER, "expected one tenant name (letters, digits, _ . -) in x-tenant metadata")
    tenant = values[0]
    if tenant == caller.tenant:
        return caller
    if caller.role is not CallerRole.ADMIN:
        raise ServiceError(
            ErrorCode.PERMISSION_DENIED, "PERMISSION_DENIED", "only an admin may act on another tenant (x-tenant)"
        )
    return Caller(tenant=tenant, role=caller.role, principal=caller.principal)
