"""The agent in process, over the in-memory store and the scripted model: no gRPC, no SQLite, no HTTP. The run
loop's tests drive it through the same services the transport calls, in milliseconds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from general_agent_server.agent import Agent
from general_agent_server.app import build_agent
from general_agent_server.config import load_settings
from general_agent_server.domain.content import TextPart
from general_agent_server.domain.context import CallContext
from general_agent_server.domain.events import RunFinished, SequencedEvent
from general_agent_server.domain.records import ApprovalDecision, CallResult
from general_agent_server.domain.session import HostedToolDefinition, SessionConfig, SessionIdentity, SessionMode
from general_agent_server.model.scripted import Answer, ScriptedModelClient
from general_agent_server.runs.approvals import ApprovalAnswer
from general_agent_server.runs.state import BusyPolicy, TurnOptions
from general_agent_server.store.memory import InMemorySessionStore

CTX = CallContext()
API_KEY = "sk-ant-in-process-0123456789"


@dataclass
class InProcess:
    agent: Agent
    model: ScriptedModelClient
    store: InMemorySessionStore

    async def session(
        self,
        *,
        mode: SessionMode = SessionMode.CODING,
        hosted: Sequence[HostedToolDefinition] = (),
        **config: Any,
    ) -> str:
        created = await self.agent.sessions.create_session(
            CTX,
            identity=SessionIdentity(mode=mode, session_id="", session_key=""),
            config=SessionConfig(hosted_tools=tuple(hosted), **config),
        )
        return created.view.record.session_id

    async def turn(self, session_id: str, text: str, *, policy: BusyPolicy = BusyPolicy.REJECT) -> list[SequencedEvent]:
        stream = self.agent.runs.stream_turn(
            CTX, session_id, (TextPart(text=text),), options=TurnOptions(busy_policy=policy)
        )
        return [event async for event in stream]

    async def submit(self, session_id: str, call_id: str, output: str, *, error: bool = False) -> list[SequencedEvent]:
        result = CallResult(content=(TextPart(text=output),), is_error=error)
        return [event async for event in self.agent.runs.submit(CTX, session_id, call_id, result)]

    async def answer(
        self, session_id: str, call_id: str, decision: ApprovalDecision, *, edited: str = "", message: str = ""
    ) -> list[SequencedEvent]:
        answer = ApprovalAnswer(decision=decision, edited_input_json=edited, message=message)
        return [event async for event in self.agent.runs.resolve_approval(CTX, session_id, call_id, answer)]

    def history(self, session_id: str) -> list[dict[str, Any]]:
        session = self.agent.cache.peek(CTX.tenant, session_id)
        assert session is not None
        return [m.api_message() for m in session.history]


def kinds(events: Sequence[SequencedEvent]) -> list[str]:
    return [e.body.kind for e in events]


def finished(events: Sequence[SequencedEvent]) -> RunFinished:
    body = events[-1].body
    assert isinstance(body, RunFinished), kinds(events)
    return body


@asynccontextmanager
async def in_process(tmp_path: Path, answers: Sequence[Answer] = (), **settings: str) -> AsyncIterator[InProcess]:
    environ = {
        "ANTHROPIC_API_KEY": API_KEY,
        "GENERAL_AGENT_STATE_DIR": str(tmp_path / "state"),
        "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "workspace"),
        "GENERAL_AGENT_MODEL_RETRY_BACKOFF": "0",
        **{f"GENERAL_AGENT_{name.upper()}": value for name, value in settings.items()},
    }
    store = InMemorySessionStore()
    model = ScriptedModelClient(answers)
    agent = build_agent(load_settings(None, environ), store=store, model=model)
    await store.open()
    await agent.start()
    try:
        yield InProcess(agent=agent, model=model, store=store)
    finally:
        await agent.shutdown(1.0)
        await store.close()
