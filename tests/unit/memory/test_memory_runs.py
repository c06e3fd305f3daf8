"""Memory in the run loop, in process (scripted model, in-memory store): recall across two sessions of one user
and never across tenants or users, trivial prompts skipped, the recall block never stored, the memory tools,
a gateway that is down or stalls (the turn completes without recall), redaction before anything is stored,
and capture that survives a restart through the outbox."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from general_agent_server.agent import Agent
from general_agent_server.app import build_agent
from general_agent_server.config import load_settings
from general_agent_server.domain.content import TextPart
from general_agent_server.domain.context import CallContext
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import RunOutcome, SequencedEvent
from general_agent_server.domain.session import MemoryConfig, SessionConfig, SessionIdentity, SessionMode
from general_agent_server.memory.everme.backend import EverMeBackend
from general_agent_server.memory.everme.config import EverMeConfig, normalise_base
from general_agent_server.memory.outbox import Outbox, Retry
from general_agent_server.memory.render import OPEN_TAG
from general_agent_server.memory.service import MemoryService
from general_agent_server.memory.setup import build_memory
from general_agent_server.model.scripted import Answer, ScriptedModelClient, text
from general_agent_server.runs.state import TurnOptions
from general_agent_server.store.memory import InMemorySessionStore
from tests.support.fake_everme import STALL, FakeEverMe
from tests.support.in_process import API_KEY, finished

TOKEN = "evt_" + "Run5Token" * 5
SECRET = "sk-ant-api03-" + "Zq9" * 12


@dataclass
class Harness:
    agent: Agent
    model: ScriptedModelClient

    async def session(self, tenant: str = "default", **memory: object) -> str:
        created = await self.agent.sessions.create_session(
            CallContext(tenant=tenant),
            identity=SessionIdentity(mode=SessionMode.GENERAL),
            config=SessionConfig(memory=MemoryConfig(**memory)),  # type: ignore[arg-type]
        )
        return created.view.record.session_id

    async def turn(self, session_id: str, prompt: str, tenant: str = "default") -> list[SequencedEvent]:
        stream = self.agent.runs.stream_turn(
            CallContext(tenant=tenant), session_id, (TextPart(text=prompt),), options=TurnOptions()
        )
        events = [event async for event in stream]
        await self.settled(tenant, session_id)
        return events

    async def settled(self, tenant: str, session_id: str) -> None:
        """The run's task has ended (it fires agent_end after run_finished), agent_end's capture has reached the
        outbox, and the outbox has sent what is due."""
        session = self.agent.cache.peek(tenant, session_id)
        assert session is not None

        async def nothing() -> None:
            return None

        await session.when_idle(nothing)
        await asyncio.gather(*self.agent.hook_runner.background)
        assert self.agent.memory is not None
        await self.agent.memory.outbox.drain(5.0)

    def last_prompt(self) -> str:
        content = self.model.requests[-1].messages[-1]["content"]
        return "\n".join(block.get("text", "") for block in content)


@asynccontextmanager
async def harness(
    tmp_path: Path, answers: Sequence[Answer], memory: MemoryService | None = None, **settings: str
) -> AsyncIterator[Harness]:
    environ = {
        "ANTHROPIC_API_KEY": API_KEY,
        "GENERAL_AGENT_STATE_DIR": str(tmp_path / "state"),
        "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "workspace"),
        **{f"GENERAL_AGENT_{name.upper()}": value for name, value in settings.items()},
    }
    store = InMemorySessionStore()
    model = ScriptedModelClient(answers)
    agent = build_agent(load_settings(None, environ), store=store, model=model, memory=memory)
    await store.open()
    await agent.start()
    try:
        yield Harness(agent=agent, model=model)
    finally:
        await agent.shutdown(1.0)
        await store.close()


async def test_recall_across_two_sessions_of_one_user_and_never_another(tmp_path: Path) -> None:
    answers = [text("Noted: teal."), text("Teal."), text("No idea."), text("No idea either.")]
    async with harness(tmp_path, answers) as h:
        first = await h.session(enabled=True, user_id="alice")
        await h.turn(first, "Please remember that my favourite colour is teal")
        second = await h.session(enabled=True, user_id="alice")
        events = await h.turn(second, "What is my favourite colour again?")
        assert finished(events).outcome is RunOutcome.COMPLETED
        prompt = h.last_prompt()
        assert OPEN_TAG in prompt
        assert "favourite colour is teal" in prompt
        session = h.agent.cache.peek("default", second)
        assert session is not None
        assert all(OPEN_TAG not in str(m.content) for m in session.history)  # applied to the call, never stored

        bob = await h.session(enabled=True, user_id="bob")
        await h.turn(bob, "What is my favourite colour again?")
        assert OPEN_TAG not in h.last_prompt()
        other_tenant = await h.session(tenant="acme", enabled=True, user_id="alice")
        await h.turn(other_tenant, "What is my favourite colour again?", tenant="acme")
        assert OPEN_TAG not in h.last_prompt()


async def test_trivial_prompts_and_sessions_without_memory_get_no_recall(tmp_path: Path) -> None:
    async with harness(tmp_path, [text("Noted."), text("Hi."), text("Hm.")]) as h:
        first = await h.session(enabled=True, user_id="carol")
        await h.turn(first, "My project is called Heron and it ships weekly")
        again = await h.session(enabled=True, user_id="carol")
        await h.turn(again, "hi Heron")
        assert OPEN_TAG not in h.last_prompt()
        tool_names = [t["name"] for t in h.model.requests[-1].tools]
        assert {"memory_search", "memory_get"} <= set(tool_names)
        plain = await h.session(user_id="carol")  # memory_default_enabled is off
        await h.turn(plain, "What is my project called, the weekly one?")
        assert OPEN_TAG not in h.last_prompt()
        assert "memory_search" not in [t["name"] for t in h.model.requests[-1].tools]


async def test_per_session_recall_fields_are_validated(tmp_path: Path) -> None:
    async with harness(tmp_path, []) as h:
        with pytest.raises(ServiceError) as caught:
            await h.session(enabled=True, user_id="dave", recall_top_k=21)
        assert caught.value.field_violations[0].field == "session.memory.recall_top_k"


async def test_memory_off_refuses_sessions_that_ask_for_it(tmp_path: Path) -> None:
    async with harness(tmp_path, [], memory_backend="off") as h:
        assert h.agent.memory is None
        with pytest.raises(ServiceError) as caught:
            await h.session(enabled=True, user_id="erin")
        assert caught.value.code is ErrorCode.UNIMPLEMENTED
        assert caught.value.metadata["capability"] == "memory"


async def test_a_secret_never_reaches_the_memory_files_or_the_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    password = "Tr0ub4dor-and-3-more"
    async with harness(tmp_path, [text("Stored.")]) as h:
        first = await h.session(enabled=True, user_id="frank")
        await h.turn(first, f"My deploy key is {SECRET} and password={password}, remember the deploy plan")
    for path in (tmp_path / "state" / "memory").iterdir():
        data = path.read_bytes()
        assert SECRET.encode() not in data, path
        assert password.encode() not in data, path
    assert SECRET not in caplog.text
    assert password not in caplog.text


def everme_memory(tmp_path: Path, base_url: str, retry: Retry | None = None, **settings: object) -> MemoryService:
    from general_agent_server.memory.settings import MemorySettings

    memory_settings = MemorySettings(
        backend="everme",
        everme_user_id="alice",
        state_dir=tmp_path / "state" / "memory",
        **settings,  # type: ignore[arg-type]
    )
    backend = EverMeBackend(EverMeConfig(api_base=normalise_base(base_url), token=TOKEN, agent_id="agent-1"))
    outbox = Outbox(
        memory_settings.state_dir / "outbox.db", backend, retry=retry or Retry(base_delay=0.05, max_delay=0.1)
    )
    return MemoryService(memory_settings, backend, outbox)


async def test_a_stalled_gateway_leaves_the_turn_without_recall(tmp_path: Path) -> None:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as gateway:
        gateway.fail("/mem/search", STALL, STALL)
        memory = everme_memory(tmp_path, gateway.base_url, recall_timeout=0.3)
        async with harness(tmp_path, [text("Hello there.")], memory=memory) as h:
            session = await h.session(enabled=True, user_id="alice")
            events = await h.turn(session, "What did we decide about the release train last week?")
            assert finished(events).outcome is RunOutcome.COMPLETED
            assert OPEN_TAG not in h.last_prompt()
            assert len(gateway.calls("/mem/search")) == 1


async def test_a_secret_in_a_user_message_never_reaches_the_gateway(tmp_path: Path) -> None:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as gateway:
        memory = everme_memory(tmp_path, gateway.base_url)
        async with harness(tmp_path, [text("Got it.")], memory=memory) as h:
            session = await h.session(enabled=True, user_id="alice")
            await h.turn(session, f"Use {SECRET} and Authorization: Bearer abcdefghijklmnop123 for the deploy plan")
        bodies = b"".join(r.body for r in gateway.calls("/mem/agent-memory"))
        assert b"deploy plan" in bodies
        assert SECRET.encode() not in bodies
        assert b"abcdefghijklmnop123" not in bodies


async def test_the_everme_backend_serves_only_the_token_owners_sessions(tmp_path: Path) -> None:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as gateway:
        memory = everme_memory(tmp_path, gateway.base_url)
        async with harness(tmp_path, [text("Ok."), text("Ok.")], memory=memory) as h:
            stranger = await h.session(enabled=True, user_id="mallory")
            await h.turn(stranger, "Remember my bank is Northwind and my sort code")
            assert gateway.requests == []
            assert "memory_search" not in [t["name"] for t in h.model.requests[-1].tools]


async def test_capture_survives_a_restart_through_the_outbox(tmp_path: Path) -> None:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as gateway:
        down = f"http://127.0.0.1:{gateway.port}"
    # The gateway is gone: the capture waits in the outbox.
    slow_retry = Retry(base_delay=60.0)
    async with harness(tmp_path, [text("Noted the plan.")], memory=everme_memory(tmp_path, down, slow_retry)) as h:
        session = await h.session(enabled=True, user_id="alice")
        await h.turn(session, "The migration plan is to move billing first, then search")
        counts = await h.agent.memory.outbox.counts()  # type: ignore[union-attr]
        assert counts == {"pending": 1}
    async with FakeEverMe(tokens=frozenset({TOKEN}), port=int(down.rsplit(":", 1)[1])) as gateway:
        async with harness(tmp_path, [], memory=everme_memory(tmp_path, gateway.base_url)) as h:
            await asyncio.sleep(0)
            await h.agent.memory.outbox.drain(5.0)  # type: ignore[union-attr]
            assert await h.agent.memory.outbox.counts() == {}  # type: ignore[union-attr]
        contents = [m["content"] for m in gateway.stored(TOKEN)]
        assert "The migration plan is to move billing first, then search" in contents
        assert "Noted the plan." in contents


async def test_build_memory_follows_the_backend_setting(tmp_path: Path) -> None:
    from general_agent_server.memory.settings import MemorySettings

    assert build_memory(MemorySettings(backend="off"), {}) is None
    local = build_memory(MemorySettings(backend="local", state_dir=tmp_path), {})
    assert local is not None
    assert local.backend.name == "local"
    await local.aclose()


async def test_inspection_lists_searches_and_forgets_a_users_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from general_agent_server.cli import main

    async with harness(tmp_path, [text("Noted: oat milk.")]) as h:
        session = await h.session(enabled=True, user_id="gina", agent_id="barista")
        await h.turn(session, "I always take oat milk in my coffee")
    state = str(tmp_path / "state")
    common = ["memory", "--state-dir", state, "--user", "gina", "--json"]
    assert await asyncio.to_thread(main, [*common[:1], "list", *common[1:]]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["content"] for m in listed[0]["messages"]] == ["I always take oat milk in my coffee", "Noted: oat milk."]
    args = ["memory", "search", "--state-dir", state, "--user", "gina", "--agent", "barista", "--query", "coffee milk"]
    assert await asyncio.to_thread(main, [*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == listed[0]["id"]
    assert await asyncio.to_thread(main, ["memory", "delete", *common[1:]]) == 0
    assert json.loads(capsys.readouterr().out)["deletedMessages"] == 2
    assert await asyncio.to_thread(main, ["memory", "list", *common[1:]]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert b"oat milk" not in (tmp_path / "state" / "memory" / "memory.db").read_bytes()


async def test_subagent_children_have_no_memory(tmp_path: Path) -> None:
    from dataclasses import replace

    async with harness(tmp_path, []) as h:
        session_id = await h.session(enabled=True, user_id="hana")
        view = await h.agent.sessions.get_session(CallContext(), session_id)
        assert h.agent.memory is not None
        assert h.agent.memory.scope_for(view.record) is not None
        child = replace(view.record, parent_session_id=session_id)
        assert h.agent.memory.scope_for(child) is None
