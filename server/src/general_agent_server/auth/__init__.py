"""Authentication and tenancy (docs/security.md): the `[auth]` and `[tenants]` tables of the settings file,
and the authenticator the transport's interceptor asks once per RPC."""

from general_agent_server.auth.authenticator import OPERATOR, Authenticator, Caller, unauthenticated
from general_agent_server.auth.config import AuthConfig, AuthConfigError, TenantPolicy, auth_config, tenant_policies

__all__ = [
    "OPERATOR",
    "AuthConfig",
    "AuthConfigError",
    "Authenticator",
    "Caller",
    "TenantPolicy",
    "auth_config",
    "tenant_policies",
    "unauthenticated",
]
