"""The hook runner: one hook over its handlers with the merge rule of its kind (modifying, void, claiming,
write path), per-handler timeouts, and what a fail-closed failure means for each hook (docs/hooks.md, "Kinds
and merge rules" and "Timeouts and failures"; hook_service.proto states each hook's rule)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from general_agent_server.hooks.payloads import shape_event
from general_agent_server.hooks.registry import (
    HOOK_KINDS,
    HookHandler,
    HookKind,
    HookRegistry,
    JsonObject,
    fails_closed,
)
from general_agent_server.observability.port import Observer, Spans
from general_agent_server.sessions import session_log


class HookFailedError(Exception):
    """A fail-closed model or prompt hook failed: the run fails HOOK_FAILED."""

    def __init__(self, hook: str, plugin_id: str, why: str) -> None:
        super().__init__(f"hook {hook} of plugin {plugin_id!r} failed: {why}")
        self.hook = hook
        self.plugin_id = plugin_id


@dataclass(frozen=True, kw_only=True, slots=True)
class HandlerError:
    plugin_id: str
    message: str


@dataclass(frozen=True, kw_only=True)
class HookOutcome:
    """The merged result (None = no opinion), how many handlers ran, and which failed."""

    result: JsonObject | None
    handler_count: int
    errors: tuple[HandlerError, ...] = ()


# ---------------------------------------------------------------------- merge rules


def _first(acc: JsonObject, result: JsonObject, key: str) -> None:
    if acc.get(key) in (None, "") and result.get(key) not in (None, ""):
        acc[key] = result[key]


def _last(acc: JsonObject, result: JsonObject, key: str) -> None:
    if result.get(key) is not None:
        acc[key] = result[key]


def _concat(acc: JsonObject, result: JsonObject, key: str) -> None:
    text = result.get(key)
    if isinstance(text, str) and text:
        acc[key] = f"{acc[key]}\n\n{text}" if acc.get(key) else text


_PROMPT_CONTEXT = ("prependContext", "prependSystemContext", "appendSystemContext")


def _merge_model(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    for key in ("modelOverride", "providerOverride"):
        _first(acc, result, key)
    return False


def _merge_prompt(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    # The highest-priority system prompt wins, as every other single value does.
    _first(acc, result, "systemPrompt")
    for key in _PROMPT_CONTEXT:
        _concat(acc, result, key)
    return False


def _merge_agent_start(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    _merge_model(acc, result, handler)
    return _merge_prompt(acc, result, handler)


def _merge_tool_call(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    # Once a handler asked for approval the input shown to the person is frozen: later rewrites do not apply.
    if "requireApproval" not in acc:
        _last(acc, result, "params")
        requested = result.get("requireApproval")
        if isinstance(requested, dict) and requested:
            acc["requireApproval"] = {**requested, "pluginId": handler.plugin_id}
    if result.get("block") is True:
        acc["block"] = True
        acc["blockReason"] = result.get("blockReason") or f"Tool call blocked by plugin hook {handler.plugin_id}"
        return True
    return False


def _merge_message_sending(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    _last(acc, result, "content")
    if result.get("cancel") is True:
        acc["cancel"] = True
        return True
    return False


def _merge_spawning(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    if result.get("threadBindingReady") is True:
        acc["threadBindingReady"] = True
    if result.get("status") == "error" and acc.get("status") != "error":
        acc["status"] = "error"
        acc["error"] = result.get("error") or f"subagent spawn refused by plugin {handler.plugin_id}"
    acc.setdefault("status", "ok")
    return False


def _merge_delivery_target(acc: JsonObject, result: JsonObject, handler: HookHandler) -> bool:
    _first(acc, result, "origin")
    return "origin" in acc


_MERGES: Mapping[str, Callable[[JsonObject, JsonObject, HookHandler], bool]] = {
    "before_model_resolve": _merge_model,
    "before_prompt_build": _merge_prompt,
    "before_agent_start": _merge_agent_start,
    "before_tool_call": _merge_tool_call,
    "message_sending": _merge_message_sending,
    "subagent_spawning": _merge_spawning,
    "subagent_delivery_target": _merge_delivery_target,
}

_MODEL_OR_PROMPT = frozenset({"before_model_resolve", "before_prompt_build", "before_agent_start"})


def _closed_result(hook: str, handler: HookHandler, why: str) -> JsonObject | None:
    """What a fail-closed failure means for each hook (docs/hooks.md, "Timeouts and failures")."""
    if hook == "before_tool_call":
        return {"block": True, "blockReason": f"hook before_tool_call of plugin {handler.plugin_id} failed: {why}"}
    if hook == "message_sending":
        return {"cancel": True}
    if HOOK_KINDS[hook] is HookKind.CLAIMING:
        return {"handled": True}
    if hook == "subagent_spawning":
        return {"status": "error", "error": f"hook of plugin {handler.plugin_id} failed: {why}"}
    if HOOK_KINDS[hook] is HookKind.WRITE_PATH:
        return {"block": True}
    if hook in _MODEL_OR_PROMPT:
        raise HookFailedError(hook, handler.plugin_id, why)
    return None


# ---------------------------------------------------------------------- the runner


@dataclass
class _Call:
    handler: HookHandler
    result: JsonObject | None = None
    error: str = ""


class HookRunner:
    """Runs one hook over its handlers with the merge rule of its kind. Timeouts are per handler and
    capped by `budget_seconds` (the run's remaining deadline) when given."""

    def __init__(self, registry: HookRegistry) -> None:
        self.registry = registry
        # Told every handler call, tool outcome and run end (observability/port.py); None: nobody asks.
        self.observer: Observer | None = None
        # Tracing's spans (observability/port.py): each handler call runs under one; None: tracing is off.
        self.spans: Spans | None = None
        self.background: set[asyncio.Task[Any]] = set()

    async def _invoke(
        self, handler: HookHandler, event: JsonObject, context: JsonObject, budget: float | None, tenant: str
    ) -> _Call:
        call = _Call(handler=handler)
        shaped = shape_event(event, handler.messages)
        started = time.perf_counter()
        if self.spans is None:
            await _call_handler(call, shaped, context, budget)
        else:
            with self.spans.hook(handler.hook, handler.plugin_id) as span:
                await _call_handler(call, shaped, context, budget)
                if call.error:
                    span.failed()
        if session_log.enabled():
            _log_call(call, shaped, context, tenant, time.perf_counter() - started)
        if self.observer is not None:
            self.observer.hook_call(handler.hook, time.perf_counter() - started, call.error is not None)
        return call

    async def run(
        self,
        hook: str,
        event: JsonObject,
        context: JsonObject,
        *,
        tenant: str = "",
        session_id: str = "",
        budget_seconds: float | None = None,
    ) -> HookOutcome:
        if hook not in HOOK_KINDS:
            raise ValueError(f"unknown hook {hook!r}")
        handlers = self.registry.handlers(hook, tenant=tenant, session_id=session_id)
        return await self._run_handlers(hook, handlers, event, context, budget_seconds, tenant)

    async def _run_handlers(
        self,
        hook: str,
        handlers: list[HookHandler],
        event: JsonObject,
        context: JsonObject,
        budget_seconds: float | None,
        tenant: str = "",
    ) -> HookOutcome:
        if not handlers:
            return HookOutcome(result=None, handler_count=0)
        kind = HOOK_KINDS[hook]
        if kind is HookKind.VOID:
            observed = await asyncio.gather(
                *(self._invoke(h, event, context, budget_seconds, tenant) for h in handlers)
            )
            return HookOutcome(result=None, handler_count=len(observed), errors=_errors(list(observed)))
        calls: list[_Call] = []
        acc: JsonObject = {}
        contributed = False
        current = dict(event)
        for handler in handlers:
            call = await self._invoke(handler, current, context, budget_seconds, tenant)
            calls.append(call)
            result = call.result
            if call.error:
                if not fails_closed(hook, handler.failure_policy):
                    continue
                result = _closed_result(hook, handler, call.error)
                if result is None:
                    continue
            if not result:
                continue
            if kind is HookKind.CLAIMING:
                if result.get("handled") is True:
                    return HookOutcome(result=result, handler_count=len(calls), errors=_errors(calls))
                continue
            if kind is HookKind.WRITE_PATH:
                contributed = True
                if result.get("block") is True:
                    return HookOutcome(result={"block": True}, handler_count=len(calls), errors=_errors(calls))
                if isinstance(result.get("message"), dict):
                    current["message"] = result["message"]
                    acc["message"] = result["message"]
                continue
            contributed = True
            if _MERGES[hook](acc, result, handler):
                break
        return HookOutcome(result=acc if contributed and acc else None, handler_count=len(calls), errors=_errors(calls))

    def fire(
        self, hook: str, event: JsonObject, context: JsonObject, *, tenant: str = "", session_id: str = ""
    ) -> None:
        """Void hooks are dispatched and not awaited: observers never stall a turn. The handlers are the
        ones registered at dispatch (a session deleted meanwhile still has its session_end delivered)."""
        handlers = self.registry.handlers(hook, tenant=tenant, session_id=session_id)
        if not handlers:
            return
        task = asyncio.create_task(
            self._run_handlers(hook, handlers, event, context, None, tenant), name=f"hook-{hook}"
        )
        self.background.add(task)
        task.add_done_callback(self.background.discard)


async def _call_handler(call: _Call, shaped: JsonObject, context: JsonObject, budget: float | None) -> None:
    """Its result or its error into `call`, within the handler's timeout capped by `budget`."""
    handler = call.handler
    timeout = handler.timeout if budget is None else max(0.0, min(handler.timeout, budget))
    try:
        call.result = await asyncio.wait_for(handler.call(shaped, {**context, "pluginId": handler.plugin_id}), timeout)
    except TimeoutError:
        call.error = f"timed out after {timeout:g}s"
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        call.error = f"{type(exc).__name__}: {exc}"


def _log_call(call: _Call, shaped: JsonObject, context: JsonObject, tenant: str, seconds: float) -> None:
    """The `hook` line of one handler call: a warning when it failed; the payload and result at DEBUG."""
    handler = call.handler
    session_id = str(context.get("sessionId") or "")
    ids = (tenant, session_id, str(context.get("runId") or "")) if session_id else None
    session_log.emit(
        "hook",
        f"hook {handler.hook} of plugin {handler.plugin_id}" + (" failed" if call.error else ""),
        ids=ids,
        body=lambda: json.dumps({"event": shaped, "result": call.result}, ensure_ascii=False, default=str),
        level=logging.WARNING if call.error else logging.INFO,
        hook=handler.hook,
        plugin_id=handler.plugin_id,
        duration_ms=round(seconds * 1000, 1),
        status="error" if call.error else "ok",
        error=call.error,
    )


def _errors(calls: list[_Call]) -> tuple[HandlerError, ...]:
    return tuple(HandlerError(plugin_id=c.handler.plugin_id, message=c.error) for c in calls if c.error)


def apply_model_override(model_ref: str, result: JsonObject | None) -> str:
    """A modelOverride with "/" replaces the whole ref; otherwise provider and model are overridden
    separately and re-joined (hook.proto BeforeModelResolveResult)."""
    if not result:
        return model_ref
    model = result.get("modelOverride") or ""
    provider = result.get("providerOverride") or ""
    if "/" in model:
        return str(model)
    current_provider, sep, current_model = model_ref.partition("/")
    if not sep:
        current_provider, current_model = "", model_ref
    provider = provider or current_provider
    model = model or current_model
    return f"{provider}/{model}" if provider else str(model)


def system_prompt_with_context(base: str, result: JsonObject | None) -> str:
    """[prependSystemContext, systemPrompt, appendSystemContext] joined by blank lines."""
    if not result:
        return base
    prompt = result.get("systemPrompt") or base
    parts = [result.get("prependSystemContext") or "", prompt, result.get("appendSystemContext") or ""]
    return "\n\n".join(p for p in parts if p)
