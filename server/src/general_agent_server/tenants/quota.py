"""Sessions per tenant (setting max_sessions_per_tenant, `[tenants.<name>] max_sessions`): a new session past
the bound (create, continue, fork, a subagent's child) is refused RESOURCE_EXHAUSTED `RESOURCE_LIMIT` with
RetryInfo before anything is stored. Stores that can count (SQLite, in-memory) are asked for the count; any
other store's sessions are listed up to the bound. Concurrent creates may pass the bound by a few."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from general_agent_server.store.port import SessionQuery, SessionStore
from general_agent_server.tenants.rules import TenantRules
from general_agent_server.tenants.slots import resource_limit

_ALL = SessionQuery(include_children=True)


async def check_session_quota(store: SessionStore, rules: TenantRules, tenant: str) -> None:
    limit = rules.max_sessions(tenant)
    if not limit:
        return
    count: Callable[[str], Awaitable[int]] | None = getattr(store, "count_sessions", None)
    if count is not None:
        sessions = await count(tenant)
    else:
        sessions = len(await store.list_sessions(tenant, _ALL, after=None, limit=limit))
    if sessions >= limit:
        raise resource_limit("this tenant has as many sessions as it may", limit, setting="max_sessions_per_tenant")
