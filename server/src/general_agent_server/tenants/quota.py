"""Sessions per tenant (setting max_sessions_per_tenant, `[tenants.<name>] max_sessions`): a new session past
the bound (create, continue, fork, a subagent's child) is refused RESOURCE_EXHAUSTED `RESOURCE_LIMIT` with
RetryInfo before anything is stored. The store keeps each tenant's count (SessionRecordStore.count_sessions),
so the check costs one read however many sessions there are. Concurrent creates may pass the bound by a few."""

from __future__ import annotations

from general_agent_server.store.port import SessionStore
from general_agent_server.tenants.rules import TenantRules
from general_agent_server.tenants.slots import resource_limit


async def check_session_quota(store: SessionStore, rules: TenantRules, tenant: str) -> None:
    limit = rules.max_sessions(tenant)
    if not limit:
        return
    if await store.count_sessions(tenant) >= limit:
        raise resource_limit("this tenant has as many sessions as it may", limit, setting="max_sessions_per_tenant")
