"""Per-tenant rules in process (docs/security.md): run slots per server and tenant, the sessions-per-tenant
bound (create, fork), and EmitHook's context naming the caller's tenant whatever the host sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from general_agent_server.auth.config import TenantPolicy
from general_agent_server.domain.context import CallContext, CallerRole
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.session import SessionConfig, SessionIdentity, SessionMode, SessionOverrides
from general_agent_server.hooks.registry import HookHandler, JsonObject
from general_agent_server.tenants.rules import TenantRules
from general_agent_server.tenants.slots import RunSlots
from tests.support.in_process import in_process

BOB = CallContext(tenant="bob", role=CallerRole.TENANT)


def test_run_slots_bound_the_server_and_each_tenant() -> None:
    rules = TenantRules(policies={"a": TenantPolicy(max_concurrent_runs=1)}, max_concurrent_runs_per_tenant=2)
    slots = RunSlots(max_runs=3, rules=rules)
    held = [slots.acquire("a")]
    with pytest.raises(ServiceError) as refused:
        slots.acquire("a")
    assert (refused.value.code, refused.value.metadata["setting"]) == (
        ErrorCode.RESOURCE_EXHAUSTED,
        "max_concurrent_runs_per_tenant",
    )
    assert refused.value.retry_after_seconds
    held += [slots.acquire("b"), slots.acquire("b")]
    with pytest.raises(ServiceError) as full:
        slots.acquire("c")
    assert full.value.metadata["setting"] == "max_concurrent_runs"
    held[0].release()
    held[0].release()  # a second release frees nothing more
    assert slots.active == 2
    held.append(slots.acquire("c"))
    with pytest.raises(ServiceError):
        slots.acquire("a")
    slots.take("a")  # a resumed run is never refused
    assert slots.active == 4


async def test_sessions_past_a_tenants_bound_are_refused(tmp_path: Path) -> None:
    async with in_process(tmp_path, max_sessions_per_tenant="2") as env:
        sessions = env.agent.sessions
        identity = SessionIdentity(mode=SessionMode.GENERAL, session_id="", session_key="")
        first = (await sessions.create_session(BOB, identity=identity, config=SessionConfig())).view
        await sessions.create_session(BOB, identity=identity, config=SessionConfig())
        with pytest.raises(ServiceError) as refused:
            await sessions.create_session(BOB, identity=identity, config=SessionConfig())
        assert (refused.value.code, refused.value.reason) == (ErrorCode.RESOURCE_EXHAUSTED, "RESOURCE_LIMIT")
        with pytest.raises(ServiceError):
            await env.agent.forks.fork_session(
                BOB,
                first.record.session_id,
                identity=identity,
                overrides=SessionOverrides(),
                at_sequence=None,
                copy_workspace=False,
                inherit_mode=True,
            )
        # Another tenant has a bound of its own.
        await sessions.create_session(CallContext(tenant="alice"), identity=identity, config=SessionConfig())
        await sessions.delete_session(BOB, first.record.session_id)
        await sessions.create_session(BOB, identity=identity, config=SessionConfig())


async def test_emit_hook_context_names_the_callers_tenant(tmp_path: Path) -> None:
    seen: list[JsonObject] = []

    async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
        seen.append(context)
        return None

    async with in_process(tmp_path) as env:
        env.agent.hook_runner.registry.register([HookHandler(plugin_id="spy", hook="session_start", call=call)])
        await env.agent.emit_hook(BOB, "session_start", {}, {"tenant": "alice", "sessionId": "chat-42"})
    assert [(c["tenant"], c["sessionId"]) for c in seen] == [("bob", "chat-42")]
