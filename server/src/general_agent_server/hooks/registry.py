"""The hook registry: the 26 hook names and their kinds, default timeouts and failure policies, the handlers
(remote registrations and in-process plugins alike) and their order: priority, highest first, ties in
registration order (docs/hooks.md).

Events and results are JSON objects in the camelCase field names of the proto3 JSON form of the typed
HookService messages (hook.proto), the shape EmitHook carries, so one registry and one runner serve remote
and in-process handlers alike."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from general_agent_server.hooks.payloads import MessageSelection

JsonObject = dict[str, Any]
HandlerFn = Callable[[JsonObject, JsonObject], Awaitable[JsonObject | None]]


class HookKind(enum.Enum):
    MODIFYING = "modifying"
    VOID = "void"
    CLAIMING = "claiming"
    WRITE_PATH = "write_path"


class FailurePolicy(enum.Enum):
    DEFAULT = "default"
    FAIL_OPEN = "fail_open"
    FAIL_CLOSED = "fail_closed"


HOOK_KINDS: Mapping[str, HookKind] = {
    "before_model_resolve": HookKind.MODIFYING,
    "before_prompt_build": HookKind.MODIFYING,
    "before_agent_start": HookKind.MODIFYING,
    "llm_input": HookKind.VOID,
    "llm_output": HookKind.VOID,
    "agent_end": HookKind.VOID,
    "before_tool_call": HookKind.MODIFYING,
    "after_tool_call": HookKind.VOID,
    "tool_result_persist": HookKind.WRITE_PATH,
    "before_message_write": HookKind.WRITE_PATH,
    "session_start": HookKind.VOID,
    "session_end": HookKind.VOID,
    "before_compaction": HookKind.VOID,
    "after_compaction": HookKind.VOID,
    "before_reset": HookKind.VOID,
    "subagent_spawning": HookKind.MODIFYING,
    "subagent_delivery_target": HookKind.MODIFYING,
    "subagent_spawned": HookKind.VOID,
    "subagent_ended": HookKind.VOID,
    "inbound_claim": HookKind.CLAIMING,
    "before_dispatch": HookKind.CLAIMING,
    "message_received": HookKind.VOID,
    "message_sending": HookKind.MODIFYING,
    "message_sent": HookKind.VOID,
    "gateway_start": HookKind.VOID,
    "gateway_stop": HookKind.VOID,
}
HOOK_NAMES = frozenset(HOOK_KINDS)
# Fired by the server itself rather than for a tenant (tenant ""): every tenant's registrations observe them,
# as there is no other way for a remote host to get them; they carry only the port or the stop reason.
SERVER_HOOKS = frozenset({"gateway_start", "gateway_stop"})
_LONG_HOOKS = frozenset({"agent_end", "before_compaction", "after_compaction"})


def default_timeout(hook: str) -> float:
    """15 s modifying, 30 s agent_end/compaction, 5 s others (hook_service.proto)."""
    if hook in _LONG_HOOKS:
        return 30.0
    return 15.0 if HOOK_KINDS[hook] is HookKind.MODIFYING else 5.0


def fails_closed(hook: str, policy: FailurePolicy) -> bool:
    if policy is FailurePolicy.DEFAULT:
        return hook == "before_tool_call"
    return policy is FailurePolicy.FAIL_CLOSED


@dataclass(frozen=True, kw_only=True)
class HookHandler:
    """One registered handler. `scope` is "" for tenant/server-wide registrations, else a session id."""

    plugin_id: str
    hook: str
    call: HandlerFn
    priority: int = 0
    timeout_seconds: float | None = None
    failure_policy: FailurePolicy = FailurePolicy.DEFAULT
    tenant: str = ""
    scope: str = ""
    order: int = 0
    # How much history this handler gets in `messages`/`historyMessages` (remote default: counts only).
    messages: MessageSelection = field(default_factory=MessageSelection)
    # For a built-in handler that serves some sessions only (memory serves those with memory on): asked with
    # (tenant, session_id), so the others neither build its payloads nor wait for it.
    serves: Callable[[str, str], bool] | None = None

    def applies(self, tenant: str, session_id: str) -> bool:
        return self.serves is None or self.serves(tenant, session_id)

    @property
    def timeout(self) -> float:
        return self.timeout_seconds if self.timeout_seconds is not None else default_timeout(self.hook)


class HookRegistry:
    """Handlers by hook name. Registering a plugin again (same plugin id and scope) replaces it."""

    def __init__(self) -> None:
        self._handlers: list[HookHandler] = []
        # The hooks at least one handler serves: most tests of the hot paths ask for hooks nobody registered.
        self._kinds: frozenset[str] = frozenset()
        self._counter = itertools.count()

    def register(self, handlers: list[HookHandler]) -> None:
        for handler in handlers:
            if handler.hook not in HOOK_KINDS:
                raise ValueError(f"unknown hook {handler.hook!r}")
        keys = {(h.tenant, h.scope, h.plugin_id) for h in handlers}
        kept = [h for h in self._handlers if (h.tenant, h.scope, h.plugin_id) not in keys]
        self._set([*kept, *(replace(handler, order=next(self._counter)) for handler in handlers)])

    def unregister(self, plugin_id: str, *, tenant: str = "", scope: str = "") -> bool:
        before = len(self._handlers)
        self._set(
            [h for h in self._handlers if not (h.plugin_id == plugin_id and h.tenant == tenant and h.scope == scope)]
        )
        return len(self._handlers) != before

    def unregister_scope(self, *, tenant: str, scope: str) -> None:
        """Drops every registration of one session (the session was deleted)."""
        self._set([h for h in self._handlers if not (h.tenant == tenant and h.scope == scope)])

    def _set(self, handlers: list[HookHandler]) -> None:
        self._handlers = handlers
        self._kinds = frozenset(h.hook for h in handlers)

    def has_handlers(self, hooks: frozenset[str], *, tenant: str = "", session_id: str = "") -> bool:
        """A cheap test the hot paths use to skip building payloads nobody receives."""
        if self._kinds.isdisjoint(hooks):
            return False
        return any(
            h.hook in hooks
            and h.tenant in ("", tenant)
            and h.scope in ("", session_id)
            and h.applies(tenant, session_id)
            for h in self._handlers
        )

    def handlers(self, hook: str, *, tenant: str = "", session_id: str = "") -> list[HookHandler]:
        """Server-wide (tenant ""), the tenant's, and the session's handlers: priority desc, then
        registration order. The server's own gateway hooks (no tenant) reach every tenant."""
        every_tenant = not tenant and hook in SERVER_HOOKS
        chosen = [
            h
            for h in self._handlers
            if h.hook == hook
            and (every_tenant or h.tenant in ("", tenant))
            and h.scope in ("", session_id)
            and h.applies(tenant, session_id)
        ]
        return sorted(chosen, key=lambda h: (-h.priority, h.order))
