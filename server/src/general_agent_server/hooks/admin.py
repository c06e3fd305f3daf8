"""Hook registrations as a resource (RegisterHooks, UnregisterHooks, ListHookRegistrations, EmitHook, and the
registrations CreateSession and ForkSession carry): stored, loaded back at start-up, and turned into handlers
of the one hook registry through the transport's dialer.

The mutual-TLS client key of a registration is a secret: it is kept in memory (and registered with the
redactor) and never stored, so a registration using mutual TLS must be made again after a restart."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.context import CallContext, CallerRole
from general_agent_server.domain.errors import ErrorCode, ServiceError, invalid_argument, not_implemented, quoted
from general_agent_server.domain.validation import InputLimits, check_size
from general_agent_server.hooks.registrations import (
    HOOK_REGISTRATION,
    HookDialer,
    HookRegistrationSpec,
    check_registration,
    handlers_for,
)
from general_agent_server.hooks.registry import HOOK_NAMES
from general_agent_server.hooks.runner import HookFailedError, HookOutcome, HookRunner
from general_agent_server.security.redaction import register_secret
from general_agent_server.security.ssrf import SsrfBlocked, check_host
from general_agent_server.store.port import SessionStore

logger = logging.getLogger(__name__)

_Key = tuple[str, str, str]  # (tenant, scope: "" or a session id, plugin id)


class HookAdmin:
    def __init__(
        self,
        *,
        store: SessionStore,
        runner: HookRunner,
        dialer: HookDialer | None,
        limits: InputLimits,
        max_payload_bytes: int,
        ssrf_allow_hosts: frozenset[str],
    ) -> None:
        self._store = store
        self.runner = runner
        self._dialer = dialer
        self._limits = limits
        self._max_payload_bytes = max_payload_bytes
        self._ssrf_allow_hosts = ssrf_allow_hosts
        # Registrations as given (with any mutual-TLS key, which the store never sees).
        self._live: dict[_Key, HookRegistrationSpec] = {}

    def dialer(self) -> HookDialer:
        if self._dialer is None:
            raise not_implemented("hooks", "remote hook registrations")
        return self._dialer

    async def load(self) -> None:
        """Registrations persist across restarts."""
        if self._dialer is None:
            return
        for _tenant, _session, _plugin, document in await self._store.list_hook_registrations():
            spec = HOOK_REGISTRATION.loads(document)
            self.runner.registry.register(handlers_for(spec, self._dialer, max_payload_bytes=self._max_payload_bytes))

    async def register(self, ctx: CallContext, spec: HookRegistrationSpec) -> HookRegistrationSpec:
        check_registration(spec, limits=self._limits)
        await self.check_target(ctx, spec, "registration.target.address")
        # Registrations live in memory for as long as the server runs: their number per scope is bounded.
        scope = await self.registrations(ctx.tenant, spec.session_id)
        count = 1 + sum(1 for s in scope if s.plugin_id != spec.plugin_id)
        check_size("registration", count, "registrations in its scope", self._limits, "max_hook_registrations")
        live, stored = self.for_store(ctx.tenant, spec)
        await self._store.put_hook_registration(
            ctx.tenant, stored.session_id, stored.plugin_id, HOOK_REGISTRATION.dumps(stored)
        )
        self.activate(live)
        return stored

    async def check_session_registrations(self, ctx: CallContext, specs: Sequence[HookRegistrationSpec]) -> None:
        """The registrations a CreateSession carries: each valid, no plugin twice, within the bound, targets
        allowed for the caller."""
        if specs:
            self.dialer()
        check_size("session.hook_registrations", len(specs), "registrations", self._limits, "max_hook_registrations")
        seen: set[str] = set()
        for index, registration in enumerate(specs):
            where = f"session.hook_registrations[{index}]"
            check_registration(registration, where, self._limits)
            if registration.plugin_id in seen:
                raise invalid_argument(f"{where}.plugin_id", f"plugin {quoted(registration.plugin_id)} listed twice")
            seen.add(registration.plugin_id)
            await self.check_target(ctx, registration, f"{where}.target.address")

    async def check_target(self, ctx: CallContext, spec: HookRegistrationSpec, field: str) -> None:
        """A tenant's hook targets pass the SSRF guard unless allow-listed; the operator's are trusted."""
        if ctx.role is not CallerRole.TENANT:
            return
        host = spec.target.rpartition(":")[0].strip("[]")
        try:
            await check_host(host, self._ssrf_allow_hosts)
        except SsrfBlocked as blocked:
            raise invalid_argument(field, f"hook target refused: {blocked.reason}", reason="INVALID_HOOK") from None

    @staticmethod
    def for_store(tenant: str, spec: HookRegistrationSpec) -> tuple[HookRegistrationSpec, HookRegistrationSpec]:
        """The registration as it lives in memory, and as it is stored (without the mutual-TLS client key)."""
        live = replace(spec, tenant=tenant, create_time=spec.create_time or utcnow())
        if live.tls is not None:
            register_secret(live.tls.client_key_pem)
        stored = live if live.tls is None else replace(live, tls=replace(live.tls, client_key_pem=""))
        return live, stored

    def activate(self, live: HookRegistrationSpec) -> None:
        """A stored registration joins the hook registry."""
        self.runner.registry.register(handlers_for(live, self.dialer(), max_payload_bytes=self._max_payload_bytes))
        self._live[(live.tenant, live.session_id, live.plugin_id)] = live
        logger.info(
            "hooks registered by plugin %s",
            live.plugin_id,
            extra={"category": "system", "tenant": live.tenant, "session_id": live.session_id},
        )

    async def copied_to(
        self, tenant: str, source_session_id: str, session_id: str
    ) -> list[tuple[HookRegistrationSpec, HookRegistrationSpec]]:
        """A session's own registrations as another session's (a fork), each as (live, stored)."""
        return [
            self.for_store(
                tenant,
                replace(
                    self._live.get((tenant, source_session_id, r.plugin_id), r), session_id=session_id, create_time=None
                ),
            )
            for r in await self.registrations(tenant, source_session_id)
        ]

    async def registrations(self, tenant: str, session_id: str) -> list[HookRegistrationSpec]:
        """The registrations of one scope, as stored."""
        return [
            HOOK_REGISTRATION.loads(document)
            for _tenant, _session, _plugin, document in await self._store.list_hook_registrations((tenant, session_id))
        ]

    async def unregister(self, ctx: CallContext, plugin_id: str, session_id: str = "") -> bool:
        removed = await self._store.delete_hook_registration(ctx.tenant, session_id, plugin_id)
        self.runner.registry.unregister(plugin_id, tenant=ctx.tenant, scope=session_id)
        self._live.pop((ctx.tenant, session_id, plugin_id), None)
        return removed

    def forget_session(self, tenant: str, session_id: str) -> None:
        """The session is deleted: its registrations leave the registry (their rows went with it)."""
        self.runner.registry.unregister_scope(tenant=tenant, scope=session_id)
        for key in [k for k in self._live if k[:2] == (tenant, session_id)]:
            del self._live[key]

    @staticmethod
    def check_hook_name(hook: str) -> None:
        if hook not in HOOK_NAMES:
            raise invalid_argument("hook_name", f"unknown hook {quoted(hook)}", reason="INVALID_HOOK")

    async def emit(
        self, ctx: CallContext, hook: str, event: dict[str, Any], context: dict[str, Any], session_id: str = ""
    ) -> HookOutcome:
        """Runs any hook with the runner's merge rules (EmitHook). The context's `tenant` is the caller's, whatever
        the host sent: handlers (memory's among them) look sessions up by it."""
        self.check_hook_name(hook)
        context = {**context, "tenant": ctx.tenant}
        try:
            return await self.runner.run(hook, event, context, tenant=ctx.tenant, session_id=session_id)
        except HookFailedError as exc:
            raise ServiceError(ErrorCode.FAILED_PRECONDITION, "HOOK_FAILED", str(exc)) from None
