"""The hook runner's ordering and merge rules (docs/hooks.md, "Order" and "Kinds and merge rules")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from general_agent_server.hooks.registry import FailurePolicy, HookHandler, HookRegistry, JsonObject
from general_agent_server.hooks.runner import (
    HookFailedError,
    HookRunner,
    apply_model_override,
    system_prompt_with_context,
)


def handler(
    plugin: str,
    hook: str,
    result: JsonObject | None = None,
    *,
    priority: int = 0,
    calls: list[str] | None = None,
    delay: float = 0.0,
    error: Exception | None = None,
    timeout: float | None = None,
    policy: FailurePolicy = FailurePolicy.DEFAULT,
    scope: str = "",
) -> HookHandler:
    async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
        if calls is not None:
            calls.append(plugin)
        if delay:
            await asyncio.sleep(delay)
        if error is not None:
            raise error
        return result

    return HookHandler(
        plugin_id=plugin,
        hook=hook,
        call=call,
        priority=priority,
        timeout_seconds=timeout,
        failure_policy=policy,
        scope=scope,
    )


def runner(*handlers: HookHandler) -> HookRunner:
    registry = HookRegistry()
    for h in handlers:
        registry.register([h])
    return HookRunner(registry)


async def test_priority_order_highest_first_ties_in_registration_order() -> None:
    calls: list[str] = []
    hooks = runner(
        handler("low", "before_prompt_build", priority=-5, calls=calls),
        handler("a", "before_prompt_build", priority=10, calls=calls),
        handler("b", "before_prompt_build", priority=10, calls=calls),
        handler("mid", "before_prompt_build", priority=0, calls=calls),
    )
    await hooks.run("before_prompt_build", {"prompt": "x"}, {})
    assert calls == ["a", "b", "mid", "low"]


async def test_prompt_merge_highest_system_prompt_wins_contexts_concatenate() -> None:
    hooks = runner(
        handler("low", "before_prompt_build", {"systemPrompt": "low", "prependContext": "low-ctx"}, priority=1),
        handler(
            "high",
            "before_prompt_build",
            {"systemPrompt": "high", "prependContext": "high-ctx", "appendSystemContext": "suffix"},
            priority=9,
        ),
    )
    outcome = await hooks.run("before_prompt_build", {"prompt": "x"}, {})
    assert outcome.result == {
        "systemPrompt": "high",
        "prependContext": "high-ctx\n\nlow-ctx",
        "appendSystemContext": "suffix",
    }
    assert outcome.handler_count == 2


async def test_model_override_first_defined_and_the_seed_join_rules() -> None:
    hooks = runner(
        handler("b", "before_model_resolve", {"modelOverride": "second"}, priority=1),
        handler("a", "before_model_resolve", {"providerOverride": "openai", "modelOverride": "gpt-5.4"}, priority=5),
    )
    outcome = await hooks.run("before_model_resolve", {"prompt": "x"}, {})
    assert outcome.result == {"providerOverride": "openai", "modelOverride": "gpt-5.4"}
    assert apply_model_override("anthropic/claude-3-7-sonnet", outcome.result) == "openai/gpt-5.4"
    assert apply_model_override("claude-x", {"modelOverride": "claude-y"}) == "claude-y"
    assert apply_model_override("anthropic/claude-x", {"modelOverride": "other/m"}) == "other/m"
    assert apply_model_override("anthropic/claude-x", None) == "anthropic/claude-x"
    assert (
        system_prompt_with_context("base", {"prependSystemContext": "pre", "appendSystemContext": "post"})
        == "pre\n\nbase\n\npost"
    )


async def test_message_sending_cancel_is_sticky_and_stops_the_chain() -> None:
    calls: list[str] = []
    hooks = runner(
        handler("first", "message_sending", {"content": "first"}, priority=3, calls=calls),
        handler("second", "message_sending", {"content": "second", "cancel": True}, priority=2, calls=calls),
        handler("third", "message_sending", {"content": "third"}, priority=1, calls=calls),
    )
    outcome = await hooks.run("message_sending", {"to": "x", "content": "hi"}, {})
    assert outcome.result == {"content": "second", "cancel": True}
    assert calls == ["first", "second"]


async def test_before_tool_call_block_stops_and_params_last_set_wins() -> None:
    calls: list[str] = []
    hooks = runner(
        handler("rewrite", "before_tool_call", {"params": {"path": "a"}}, priority=9, calls=calls),
        handler("rewrite2", "before_tool_call", {"params": {"path": "b"}}, priority=8, calls=calls),
        handler("blocker", "before_tool_call", {"block": True}, priority=5, calls=calls),
        handler("never", "before_tool_call", {"params": {"path": "c"}}, priority=1, calls=calls),
    )
    outcome = await hooks.run("before_tool_call", {"toolName": "write", "params": {"path": "z"}}, {})
    assert outcome.result == {
        "params": {"path": "b"},
        "block": True,
        "blockReason": "Tool call blocked by plugin hook blocker",
    }
    assert calls == ["rewrite", "rewrite2", "blocker"]


@pytest.mark.parametrize("failure", ["timeout", "raise"])
async def test_before_tool_call_fails_closed_and_other_hooks_fail_open(failure: str) -> None:
    broken: dict[str, Any] = (
        {"delay": 5.0, "timeout": 0.05} if failure == "timeout" else {"error": RuntimeError("boom")}
    )
    hooks = runner(handler("guard", "before_tool_call", {"params": {}}, **broken))
    outcome = await hooks.run("before_tool_call", {"toolName": "exec", "params": {}}, {})
    assert outcome.result is not None
    assert outcome.result["block"] is True
    assert "guard" in outcome.result["blockReason"]
    assert [e.plugin_id for e in outcome.errors] == ["guard"]
    open_hooks = runner(handler("ctx", "before_prompt_build", {"prependContext": "x"}, **broken))
    assert (await open_hooks.run("before_prompt_build", {}, {})).result is None
    closed_prompt = runner(
        handler("ctx", "before_prompt_build", {"prependContext": "x"}, policy=FailurePolicy.FAIL_CLOSED, **broken)
    )
    with pytest.raises(HookFailedError):
        await closed_prompt.run("before_prompt_build", {}, {})
    open_tool = runner(handler("guard", "before_tool_call", {}, policy=FailurePolicy.FAIL_OPEN, **broken))
    assert (await open_tool.run("before_tool_call", {}, {})).result is None


async def test_claiming_first_handled_wins() -> None:
    calls: list[str] = []
    hooks = runner(
        handler("no", "before_dispatch", {"handled": False}, priority=3, calls=calls),
        handler("yes", "before_dispatch", {"handled": True, "text": "mine"}, priority=2, calls=calls),
        handler("late", "before_dispatch", {"handled": True, "text": "late"}, priority=1, calls=calls),
    )
    outcome = await hooks.run("before_dispatch", {"content": "hi"}, {})
    assert outcome.result == {"handled": True, "text": "mine"}
    assert calls == ["no", "yes"]


async def test_write_path_chains_and_block_skips() -> None:
    seen: list[Any] = []

    async def upper(event: JsonObject, context: JsonObject) -> JsonObject:
        seen.append(event["message"]["text"])
        return {"message": {"text": event["message"]["text"].upper()}}

    async def exclaim(event: JsonObject, context: JsonObject) -> JsonObject:
        seen.append(event["message"]["text"])
        return {"message": {"text": event["message"]["text"] + "!"}}

    registry = HookRegistry()
    registry.register([HookHandler(plugin_id="u", hook="before_message_write", call=upper, priority=2)])
    registry.register([HookHandler(plugin_id="e", hook="before_message_write", call=exclaim, priority=1)])
    outcome = await HookRunner(registry).run("before_message_write", {"message": {"text": "hi"}}, {})
    assert outcome.result == {"message": {"text": "HI!"}}
    assert seen == ["hi", "HI"]
    blocking = runner(handler("b", "before_message_write", {"block": True}))
    assert (await blocking.run("before_message_write", {"message": {}}, {})).result == {"block": True}


async def test_void_hooks_run_concurrently_and_failures_are_collected() -> None:
    started = asyncio.Event()

    async def waits(event: JsonObject, context: JsonObject) -> None:
        await asyncio.wait_for(started.wait(), 2)

    async def releases(event: JsonObject, context: JsonObject) -> None:
        started.set()

    registry = HookRegistry()
    registry.register([HookHandler(plugin_id="w", hook="agent_end", call=waits, priority=5)])
    registry.register([HookHandler(plugin_id="r", hook="agent_end", call=releases, priority=1)])
    registry.register([handler("x", "agent_end", error=ValueError("nope"))])
    outcome = await HookRunner(registry).run("agent_end", {"success": True}, {})
    assert outcome.result is None
    assert outcome.handler_count == 3
    assert [(e.plugin_id, e.message) for e in outcome.errors] == [("x", "ValueError: nope")]


async def test_session_scoped_registrations_and_replacement() -> None:
    registry = HookRegistry()
    registry.register([handler("p", "before_prompt_build", {"prependContext": "one"})])
    registry.register([handler("p", "before_prompt_build", {"prependContext": "two"})])
    registry.register([handler("s", "before_prompt_build", {"prependContext": "session"}, scope="sess-1")])
    run = HookRunner(registry)
    assert (await run.run("before_prompt_build", {}, {}, session_id="sess-2")).result == {"prependContext": "two"}
    both = await run.run("before_prompt_build", {}, {}, session_id="sess-1")
    assert both.result == {"prependContext": "two\n\nsession"}
    assert registry.unregister("p") is True
    assert registry.unregister("p") is False
    with pytest.raises(ValueError, match="unknown hook"):
        await run.run("not_a_hook", {}, {})


def test_has_handlers_asks_a_handler_only_about_its_own_hook_and_follows_registrations() -> None:
    """The hot paths ask about hooks nobody registered most of the time: such a question asks no handler (a
    built-in's `serves` is not called), and the answer follows registering and unregistering."""
    asked: list[tuple[str, str]] = []

    def serves(tenant: str, session_id: str) -> bool:
        asked.append((tenant, session_id))
        return session_id == "on"

    registry = HookRegistry()

    async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
        return None

    registry.register([HookHandler(plugin_id="memory", hook="agent_end", call=call, serves=serves)])
    assert not registry.has_handlers(frozenset({"before_tool_call"}), tenant="t", session_id="on")
    assert asked == []
    assert registry.has_handlers(frozenset({"agent_end", "before_tool_call"}), tenant="t", session_id="on")
    assert not registry.has_handlers(frozenset({"agent_end"}), tenant="t", session_id="off")
    assert asked == [("t", "on"), ("t", "off")]
    registry.register([handler("gate", "before_tool_call")])
    assert registry.has_handlers(frozenset({"before_tool_call"}), tenant="t", session_id="any")
    assert registry.unregister("gate")
    assert not registry.has_handlers(frozenset({"before_tool_call"}), tenant="t", session_id="any")
    registry.unregister_scope(tenant="", scope="")
    assert not registry.has_handlers(frozenset({"agent_end"}), tenant="t", session_id="on")
