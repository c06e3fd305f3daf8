"""In-process plugins (docs/hooks.md): Python entry points in the group `general_agent.plugins`, each named
by its plugin id. `plugin_mode` decides what loads, so an operator controls which code runs inside the server:

- DISABLED: nothing loads;
- ALLOWLISTED: only ids listed in `enabled_plugin_ids`;
- FULL_EMBEDDED: every installed plugin.

An entry point refers to a callable (a class or a function) taking the plugin id and returning an object
with `register(hooks: PluginHooks) -> None`; there it adds its handlers, which join the same registry and
merge rules as remote ones. In-process handlers get whole histories (`include_messages` ALL) unless they
ask for less."""

from __future__ import annotations

import enum
import importlib.metadata
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from general_agent_server.hooks.payloads import IncludeMessages, MessageSelection
from general_agent_server.hooks.registry import HOOK_KINDS, FailurePolicy, HandlerFn, HookHandler, HookRegistry

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "general_agent.plugins"


class PluginMode(enum.Enum):
    DISABLED = "DISABLED"
    ALLOWLISTED = "ALLOWLISTED"
    FULL_EMBEDDED = "FULL_EMBEDDED"


def normalise_plugin_ids(raw: Iterable[str]) -> tuple[str, ...]:
    """Trimmed, lower-cased, de-duplicated, order kept."""
    return tuple(dict.fromkeys(item.strip().lower() for item in raw if item.strip()))


@dataclass
class PluginHooks:
    """What a plugin's `register` receives: `on(hook, ...)` decorates an async handler."""

    plugin_id: str
    handlers: list[HookHandler] = field(default_factory=list)

    def on(
        self,
        hook: str,
        *,
        priority: int = 0,
        timeout_seconds: float | None = None,
        failure_policy: FailurePolicy = FailurePolicy.DEFAULT,
        include_messages: IncludeMessages = IncludeMessages.ALL,
        last_n: int = 0,
    ) -> Callable[[HandlerFn], HandlerFn]:
        if hook not in HOOK_KINDS:
            raise ValueError(f"plugin {self.plugin_id}: unknown hook {hook!r}")

        def decorate(function: HandlerFn) -> HandlerFn:
            self.handlers.append(
                HookHandler(
                    plugin_id=self.plugin_id,
                    hook=hook,
                    call=function,
                    priority=priority,
                    timeout_seconds=timeout_seconds,
                    failure_policy=failure_policy,
                    messages=MessageSelection(include=include_messages, last_n=last_n),
                )
            )
            return function

        return decorate


class Plugin(Protocol):
    def register(self, hooks: PluginHooks) -> None: ...


PluginFactory = Callable[[str], Plugin]


@dataclass(frozen=True)
class LoadedPlugins:
    ids: tuple[str, ...]
    plugins: tuple[Plugin, ...] = ()


def load_plugins(
    registry: HookRegistry,
    *,
    mode: PluginMode,
    enabled_ids: Iterable[str],
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> LoadedPlugins:
    """Loads the plugins the mode allows and registers their handlers server-wide. A plugin that fails to
    load or register is logged and skipped: one bad plugin does not keep the server down."""
    if mode is PluginMode.DISABLED:
        return LoadedPlugins(ids=())
    available = {
        ep.name.strip().lower(): ep
        for ep in (
            entry_points if entry_points is not None else importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        )
    }
    wanted = normalise_plugin_ids(enabled_ids)
    if mode is PluginMode.ALLOWLISTED:
        for unknown in (i for i in wanted if i not in available):
            logger.warning("enabled plugin %r is not installed", unknown, extra={"category": "system"})
        chosen = [i for i in wanted if i in available]
    else:
        chosen = sorted(available)
    loaded: list[str] = []
    plugins: list[Plugin] = []
    for plugin_id in chosen:
        try:
            factory: PluginFactory = available[plugin_id].load()
            plugin = factory(plugin_id)
            hooks = PluginHooks(plugin_id=plugin_id)
            plugin.register(hooks)
        except Exception:
            logger.exception("plugin %r failed to load; skipped", plugin_id, extra={"category": "system"})
            continue
        registry.register(hooks.handlers)
        loaded.append(plugin_id)
        plugins.append(plugin)
        logger.info(
            "plugin %s loaded with %d hook handler(s)", plugin_id, len(hooks.handlers), extra={"category": "system"}
        )
    return LoadedPlugins(ids=tuple(loaded), plugins=tuple(plugins))
