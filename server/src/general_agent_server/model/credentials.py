"""Which credential a model call uses (README, Configuration: auth profiles, tenant default profiles and a
session's in-memory `api_key`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from general_agent_server.model.port import Credential
from general_agent_server.security.redaction import register_secret


@dataclass(frozen=True, kw_only=True, slots=True)
class AuthProfile:
    """A server-side credential. `allowed_tenants` empty means every tenant may use it."""

    profile_id: str
    api_key: str = field(repr=False, default="")
    base_url: str | None = None
    allowed_tenants: frozenset[str] = frozenset()

    def allows(self, tenant: str) -> bool:
        return not self.allowed_tenants or tenant in self.allowed_tenants


class CredentialResolver:
    """Resolution order: the session's in-memory key; the session's profile; the tenant's default
    profile; the server default profile. A session that names a profile uses only that profile (plus an
    in-memory key), so a continuation after a restart never silently bills another account."""

    def __init__(
        self,
        profiles: Mapping[str, AuthProfile],
        *,
        tenant_defaults: Mapping[str, str],
        server_default: AuthProfile | None,
    ) -> None:
        self._profiles = dict(profiles)
        self._tenant_defaults = dict(tenant_defaults)
        self._server_default = server_default

    def has_profile(self, profile_id: str) -> bool:
        return profile_id in self._profiles

    def resolve(self, *, tenant: str, session_profile_id: str, memory_api_key: str) -> Credential | None:
        if session_profile_id:
            profile = self._profiles.get(session_profile_id)
            if profile is None or not profile.allows(tenant):
                return None
            key = memory_api_key or profile.api_key
            return Credential(api_key=key, base_url=profile.base_url, profile_id=profile.profile_id) if key else None
        fallback = self._tenant_profile(tenant) or self._server_profile(tenant)
        if memory_api_key:
            return Credential(
                api_key=memory_api_key,
                base_url=fallback.base_url if fallback else None,
                profile_id="session",
            )
        if fallback is None or not fallback.api_key:
            return None
        return Credential(api_key=fallback.api_key, base_url=fallback.base_url, profile_id=fallback.profile_id)

    def why_none(self, *, tenant: str, session_profile_id: str) -> str:
        """Why `resolve` found no credential, naming the profile that failed and how (never a key)."""
        if session_profile_id:
            profile = self._profiles.get(session_profile_id)
            if profile is None:
                return f"the session's auth profile {session_profile_id!r} is not configured on this server"
            if not profile.allows(tenant):
                return f"the session's auth profile {session_profile_id!r} is not available to tenant {tenant!r}"
            return f"the session's auth profile {session_profile_id!r} has no API key (set its key env or file)"
        profile_id = self._tenant_defaults.get(tenant)
        if profile_id:
            profile = self._profiles.get(profile_id)
            if profile is not None and not profile.allows(tenant):
                return f"tenant {tenant!r}'s default auth profile {profile_id!r} is not available to it"
        server = self._server_default
        if server is not None and server.api_key and not server.allows(tenant):
            return f"the server's default credential is not available to tenant {tenant!r}"
        return (
            "no API key resolves for this session: set ANTHROPIC_API_KEY, configure an auth profile, "
            "or pass api_key on CreateSession/ResumeSession"
        )

    def _tenant_profile(self, tenant: str) -> AuthProfile | None:
        profile_id = self._tenant_defaults.get(tenant)
        profile = self._profiles.get(profile_id) if profile_id else None
        return profile if profile is not None and profile.allows(tenant) else None

    def _server_profile(self, tenant: str) -> AuthProfile | None:
        profile = self._server_default
        return profile if profile is not None and profile.allows(tenant) else None

    def configured(self) -> list[Credential]:
        """The credential of every configured profile with a key (the server default first), for warming their
        clients before the server serves."""
        profiles = [self._server_default, *self._profiles.values()]
        return [
            Credential(api_key=p.api_key, base_url=p.base_url, profile_id=p.profile_id)
            for p in profiles
            if p is not None and p.api_key
        ]

    def secrets(self) -> list[str]:
        """Every configured key, for scrubbing."""
        keys = [p.api_key for p in self._profiles.values()]
        if self._server_default is not None:
            keys.append(self._server_default.api_key)
        return [k for k in keys if k]


class SessionKeys:
    """The in-memory API key overrides of sessions (CreateSession/ResumeSession `api_key`): never persisted,
    registered with the redactor so they appear nowhere, gone with the process."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str], str] = {}

    def get(self, tenant: str, session_id: str) -> str:
        return self._keys.get((tenant, session_id), "")

    def set(self, tenant: str, session_id: str, api_key: str) -> None:
        if api_key:
            self._keys[(tenant, session_id)] = register_secret(api_key)

    def forget(self, tenant: str, session_id: str) -> None:
        self._keys.pop((tenant, session_id), None)
