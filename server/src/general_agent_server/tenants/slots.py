"""Run slots: how many runs execute at once, in the server and per tenant (settings max_concurrent_runs and
max_concurrent_runs_per_tenant, `[tenants.<name>] max_concurrent_runs`). A turn past either bound is refused at
once with RESOURCE_EXHAUSTED `RESOURCE_LIMIT` and RetryInfo, before anything is written; admitted runs keep
theirs until their task ends (a suspended run holds none)."""

from __future__ import annotations

from collections import Counter

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.tenants.rules import TenantRules

RETRY_AFTER_SECONDS = 1.0


def resource_limit(what: str, limit: int, *, setting: str) -> ServiceError:
    return ServiceError(
        ErrorCode.RESOURCE_EXHAUSTED,
        "RESOURCE_LIMIT",
        f"{what} ({limit}); retry later",
        metadata={"limit": str(limit), "setting": setting},
        retry_after_seconds=RETRY_AFTER_SECONDS,
    )


class RunSlot:
    """One held slot; released once (a second release is a no-op)."""

    __slots__ = ("_slots", "tenant")

    def __init__(self, slots: RunSlots, tenant: str) -> None:
        self._slots: RunSlots | None = slots
        self.tenant = tenant

    def release(self) -> None:
        if self._slots is not None:
            self._slots._release(self.tenant)
            self._slots = None


class RunSlots:
    def __init__(self, *, max_runs: int, rules: TenantRules) -> None:
        self._max = max_runs
        self._rules = rules
        self._total = 0
        self._by_tenant: Counter[str] = Counter()

    @property
    def active(self) -> int:
        return self._total

    def acquire(self, tenant: str) -> RunSlot:
        """A slot for a new run of `tenant`, or RESOURCE_EXHAUSTED."""
        self.check(tenant)
        return self.take(tenant)

    def check(self, tenant: str) -> None:
        """RESOURCE_EXHAUSTED when a new run of `tenant` would pass a bound now. Asked before a turn takes the
        session's lease, so a refusal costs no store round trip."""
        if self._max and self._total >= self._max:
            raise resource_limit(
                "the server runs as many turns as it may at once", self._max, setting="max_concurrent_runs"
            )
        tenant_max = self._rules.max_runs(tenant)
        if tenant_max and self._by_tenant[tenant] >= tenant_max:
            raise resource_limit(
                "this tenant runs as many turns as it may at once", tenant_max, setting="max_concurrent_runs_per_tenant"
            )

    def take(self, tenant: str) -> RunSlot:
        """A slot whatever the bounds (a suspended run resumed by its host's answer is never refused)."""
        self._total += 1
        self._by_tenant[tenant] += 1
        return RunSlot(self, tenant)

    def _release(self, tenant: str) -> None:
        self._total -= 1
        self._by_tenant[tenant] -= 1
        if self._by_tenant[tenant] <= 0:
            del self._by_tenant[tenant]
