"""The authentication and tenant tables of the TOML file (docs/security.md): `[[auth.tokens]]` (bearer
tokens), `[[auth.client_certs]]` (mutual-TLS client certificates) and `[tenants.<name>]` (per-tenant
overrides). Tokens are kept only as SHA-256 digests; a token read from the environment or a file is
registered with the secret scrubber so no sink ever shows it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from general_agent_server.domain.context import CallerRole
from general_agent_server.security.redaction import register_secret

TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")
_TOKEN_SOURCES = ("token_sha256", "token_env", "token_file")
_TOKEN_KEYS = frozenset({"name", "tenant", "role", *_TOKEN_SOURCES})
_CERT_KEYS = frozenset({"subject", "tenant", "role"})
_TENANT_KEYS = frozenset({"max_concurrent_runs", "max_sessions", "exec", "approval_policy"})
# Shorter tokens are too easy to guess; the check applies where the server sees the token itself.
MIN_TOKEN_CHARS = 16


class AuthConfigError(ValueError):
    """The auth or tenants table is invalid; the message names the entry and key."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenEntry:
    """One bearer token: who presents it (name, for logs), its tenant and role, and its SHA-256 digest."""

    name: str
    tenant: str
    role: CallerRole
    digest: bytes = field(repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientCertEntry:
    """A client certificate whose common name or a subject alternative name equals `subject`."""

    subject: str
    tenant: str
    role: CallerRole


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantPolicy:
    """A `[tenants.<name>]` table; None keeps the server's setting."""

    max_concurrent_runs: int | None = None
    max_sessions: int | None = None
    exec: bool | None = None
    approval_policy: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AuthConfig:
    tokens: tuple[TokenEntry, ...] = ()
    client_certs: tuple[ClientCertEntry, ...] = ()

    @property
    def enabled(self) -> bool:
        """Callers must authenticate (a token or a mapped client certificate) once any is configured."""
        return bool(self.tokens or self.client_certs)

    def admin_tenants(self) -> frozenset[str]:
        """The operator's own tenants: those of admin tokens and certificates."""
        tokens = {e.tenant for e in self.tokens if e.role is CallerRole.ADMIN}
        return frozenset(tokens | {e.tenant for e in self.client_certs if e.role is CallerRole.ADMIN})


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _role(value: Any, where: str) -> CallerRole:
    if value not in ("tenant", "admin"):
        raise AuthConfigError(f"{where}.role: expected tenant or admin, got {value!r}")
    return CallerRole(value)


def _tenant(value: Any, where: str) -> str:
    if not isinstance(value, str) or not TENANT_NAME.match(value):
        raise AuthConfigError(f"{where}.tenant: expected 1-63 letters, digits, _ . - (not starting with . _ -)")
    return value


def _unknown_keys(spec: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(spec) - known)
    if unknown:
        raise AuthConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")


def _secret_token(value: str, where: str) -> bytes:
    if len(value) < MIN_TOKEN_CHARS:
        raise AuthConfigError(f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters")
    return token_digest(register_secret(value))


def _digest(spec: Mapping[str, Any], where: str, environ: Mapping[str, str]) -> bytes:
    given = [key for key in _TOKEN_SOURCES if key in spec]
    if len(given) != 1:
        raise AuthConfigError(f"{where}: set exactly one of token_sha256, token_env, token_file")
    key = given[0]
    value = spec[key]
    if not isinstance(value, str) or not value:
        raise AuthConfigError(f"{where}.{key}: must be a non-empty string")
    if key == "token_sha256":
        if not _HEX_DIGEST.match(value):
            raise AuthConfigError(f"{where}.token_sha256: expected 64 hex digits (the SHA-256 of the token)")
        return bytes.fromhex(value)
    if key == "token_env":
        if value not in environ:
            raise AuthConfigError(f"{where}.token_env: the environment variable {value} is not set")
        return _secret_token(environ[value].strip(), f"{where}.token_env")
    try:
        text = Path(value).read_text()
    except OSError as exc:
        raise AuthConfigError(f"{where}.token_file: cannot read {value}: {exc.strerror}") from None
    return _secret_token(text.strip(), f"{where}.token_file")


def _tokens(raw: Any, environ: Mapping[str, str]) -> tuple[TokenEntry, ...]:
    if not isinstance(raw, list):
        raise AuthConfigError("auth.tokens: must be an array of tables ([[auth.tokens]])")
    entries: list[TokenEntry] = []
    for index, spec in enumerate(raw):
        where = f"auth.tokens[{index}]"
        if not isinstance(spec, dict):
            raise AuthConfigError(f"{where}: must be a table")
        _unknown_keys(spec, _TOKEN_KEYS, where)
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise AuthConfigError(f"{where}.name: required")
        if any(e.name == name for e in entries):
            raise AuthConfigError(f"{where}.name: {name!r} names another token too")
        digest = _digest(spec, where, environ)
        if any(e.digest == digest for e in entries):
            raise AuthConfigError(f"{where}: the same token as another entry")
        entries.append(
            TokenEntry(
                name=name, tenant=_tenant(spec.get("tenant"), where), role=_role(spec.get("role"), where), digest=digest
            )
        )
    return tuple(entries)


def _client_certs(raw: Any) -> tuple[ClientCertEntry, ...]:
    if not isinstance(raw, list):
        raise AuthConfigError("auth.client_certs: must be an array of tables ([[auth.client_certs]])")
    entries: list[ClientCertEntry] = []
    for index, spec in enumerate(raw):
        where = f"auth.client_certs[{index}]"
        if not isinstance(spec, dict):
            raise AuthConfigError(f"{where}: must be a table")
        _unknown_keys(spec, _CERT_KEYS, where)
        subject = spec.get("subject")
        if not isinstance(subject, str) or not subject:
            raise AuthConfigError(f"{where}.subject: required (a certificate's CN or a SAN)")
        if any(e.subject == subject for e in entries):
            raise AuthConfigError(f"{where}.subject: {subject!r} is mapped twice")
        entries.append(
            ClientCertEntry(
                subject=subject, tenant=_tenant(spec.get("tenant"), where), role=_role(spec.get("role"), where)
            )
        )
    return tuple(entries)


def auth_config(raw: Any, environ: Mapping[str, str]) -> AuthConfig:
    """The `[auth]` table of the TOML file."""
    if not isinstance(raw, dict):
        raise AuthConfigError("auth: must be a table")
    _unknown_keys(raw, frozenset({"tokens", "client_certs"}), "auth")
    return AuthConfig(
        tokens=_tokens(raw.get("tokens", []), environ), client_certs=_client_certs(raw.get("client_certs", []))
    )


def _optional_int(spec: Mapping[str, Any], key: str, where: str) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AuthConfigError(f"{where}.{key}: must be a non-negative integer (0: no limit)")
    return value


def _policy(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(e.strip() for e in value.split(",") if e.strip())
    if isinstance(value, list) and all(isinstance(e, str) for e in value):
        return tuple(e.strip() for e in value if e.strip())
    raise AuthConfigError(f"{where}.approval_policy: expected a list of strings or a comma-separated string")


def tenant_policies(raw: Any) -> dict[str, TenantPolicy]:
    """The `[tenants.<name>]` tables of the TOML file."""
    if not isinstance(raw, dict):
        raise AuthConfigError("tenants: must be a table of tenants")
    policies: dict[str, TenantPolicy] = {}
    for name, spec in raw.items():
        where = f"tenants.{name}"
        if not TENANT_NAME.match(name):
            raise AuthConfigError(f"{where}: not a valid tenant name")
        if not isinstance(spec, dict):
            raise AuthConfigError(f"{where}: must be a table")
        _unknown_keys(spec, _TENANT_KEYS, where)
        exec_enabled = spec.get("exec")
        if exec_enabled is not None and not isinstance(exec_enabled, bool):
            raise AuthConfigError(f"{where}.exec: must be true or false")
        policies[name] = TenantPolicy(
            max_concurrent_runs=_optional_int(spec, "max_concurrent_runs", where),
            max_sessions=_optional_int(spec, "max_sessions", where),
            exec=exec_enabled,
            approval_policy=_policy(spec.get("approval_policy"), where),
        )
    return policies
