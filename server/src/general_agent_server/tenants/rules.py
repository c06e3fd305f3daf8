"""Per-tenant rules (docs/security.md, "Tenants"): the server's settings, overridden by a `[tenants.<name>]`
table. Without authentication every caller is the operator and nothing here restricts it; with it, `exec` (and
its `process` companion) is offered only to the sessions of tenants the operator enabled it for, or of the
operator's own tenants (those of admin tokens and certificates)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from general_agent_server.auth.config import TenantPolicy

EXEC_TOOLS = frozenset({"exec", "process"})
# The policy of a tenant without a table of its own (frozen, so one serves every lookup: one per run admitted).
_NO_TABLE = TenantPolicy()


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantRules:
    auth_enabled: bool = False
    operator_tenants: frozenset[str] = frozenset()
    policies: Mapping[str, TenantPolicy] = field(default_factory=dict)
    max_concurrent_runs_per_tenant: int = 0
    max_sessions_per_tenant: int = 0

    def policy(self, tenant: str) -> TenantPolicy:
        return self.policies.get(tenant) or _NO_TABLE

    def exec_allowed(self, tenant: str) -> bool:
        if not self.auth_enabled:
            return True
        chosen = self.policy(tenant).exec
        return chosen if chosen is not None else tenant in self.operator_tenants

    def withheld_tools(self, tenant: str) -> frozenset[str]:
        """Built-in tools the sessions of `tenant` are not offered."""
        return frozenset() if self.exec_allowed(tenant) else EXEC_TOOLS

    def approval_policy(self, tenant: str, default: tuple[str, ...]) -> tuple[str, ...]:
        chosen = self.policy(tenant).approval_policy
        return chosen if chosen is not None else default

    def max_runs(self, tenant: str) -> int:
        """Concurrent runs of the tenant; 0: no limit of its own."""
        chosen = self.policy(tenant).max_concurrent_runs
        return chosen if chosen is not None else self.max_concurrent_runs_per_tenant

    def max_sessions(self, tenant: str) -> int:
        chosen = self.policy(tenant).max_sessions
        return chosen if chosen is not None else self.max_sessions_per_tenant
