"""session_end's messageCount is the session's transcript count, a store read: it is read only when a session_end
handler listens, not for every session evicted from the cache or still loaded at shutdown."""

from __future__ import annotations

from pathlib import Path

import pytest

from general_agent_server.hooks.registry import HookHandler, JsonObject
from general_agent_server.model.scripted import text
from general_agent_server.sessions.live import LiveSession
from tests.support.in_process import CTX, InProcess, in_process


async def _started_session(agent: InProcess) -> LiveSession:
    """A loaded session after one turn (session_start fired)."""
    sid = await agent.session()
    await agent.turn(sid, "hello")
    session = agent.agent.cache.peek(CTX.tenant, sid)
    assert session is not None
    assert session.hooks.session_started
    return session


async def test_without_a_session_end_handler_the_transcript_is_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with in_process(tmp_path, [text("hi")]) as agent:
        session, counted = await _started_session(agent), []
        real = agent.store.count_transcript

        async def counting(tenant: str, session_id: str) -> int:
            counted.append(session_id)
            return await real(tenant, session_id)

        monkeypatch.setattr(agent.store, "count_transcript", counting)
        await session.end_session_hooks(wait=True)
        assert counted == []
        assert not session.hooks.session_started


async def test_a_session_end_handler_gets_the_transcript_count(tmp_path: Path) -> None:
    seen: list[JsonObject] = []

    async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
        seen.append(event)
        return None

    async with in_process(tmp_path, [text("hi")]) as agent:
        session = await _started_session(agent)
        agent.agent.hook_runner.registry.register([HookHandler(plugin_id="spy", hook="session_end", call=call)])
        await session.end_session_hooks(wait=True)
        expected = await agent.store.count_transcript(CTX.tenant, session.session_id)
    assert [(e["sessionId"], e["messageCount"]) for e in seen] == [(session.session_id, expected)]
    assert expected > 0
