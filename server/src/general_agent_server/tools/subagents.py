"""The `subagents` tool (docs/tools.md): a child session with its own
instructions, model and allowed tools runs one turn to completion and its final text returns to the parent.

A failed child (hook refusal, failed or stopped run) is a tool error the model sees as such; the parent's stop and
cancel reach the child, so a stopped run leaves nothing running behind it; the result is the child's final answer rather
than every delta of every round, which the parent's model would have to read through. The child is stored as a session
whose `parent_session_id` is the parent, listed only when asked (ListSessions include_children / parent_session_id)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.events import RunFinished, RunOutcome, SequencedEvent
from general_agent_server.domain.session import SessionConfig, SessionIdentity, SessionRecord
from general_agent_server.hooks.session_hooks import SessionHooks
from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSet, ToolSpec

TOOL_NAME = "subagents"

SPEC = ToolSpec(
    name=TOOL_NAME,
    description=(
        "Delegate a self-contained task to a subagent: a fresh session with its own instructions (system "
        "prompt), optionally another model and a subset of your tools. It works until it is done and its "
        "final answer comes back as this tool's result. It does not see this conversation: put everything "
        "it needs in `instructions` and `task`."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "instructions": {"type": "string", "minLength": 1, "description": "System prompt of the subagent."},
            "task": {"type": "string", "minLength": 1, "description": "What the subagent should do."},
            "label": {"type": "string", "maxLength": 64, "description": "A short name for the subagent."},
            "modelRef": {"type": "string", "description": "Model ref for the subagent (default: yours)."},
            "allowedTools": {
                "type": "array",
                "items": {"type": "string"},
                "uniqueItems": True,
                "description": "Tools the subagent may use (default: your built-in tools except subagents).",
            },
        },
        "required": ["instructions", "task"],
        "additionalProperties": False,
    },
    read_only=True,
)


class ParentSession(Protocol):
    """What the tool reads of the session whose model called it."""

    @property
    def record(self) -> SessionRecord: ...

    @property
    def hooks(self) -> SessionHooks: ...

    def toolset(self) -> ToolSet: ...

    async def end_session_hooks(self, *, wait: bool, deleted: bool = False) -> None: ...


class ChildSessions(Protocol):
    """How the tool creates and drives child sessions (sessions/children.py implements it)."""

    def loaded(self, tenant: str, session_id: str) -> ParentSession | None: ...

    async def create(
        self, tenant: str, *, parent_session_id: str, identity: SessionIdentity, config: SessionConfig, agent_id: str
    ) -> None: ...

    def run(self, tenant: str, session_id: str, task: str) -> AsyncIterator[SequencedEvent]: ...

    async def stop(self, tenant: str, session_id: str) -> None: ...

    def last_text(self, tenant: str, session_id: str) -> str: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class _Child:
    session_id: str
    session_key: str
    agent_id: str


class SubagentTool:
    """A local tool that creates and drives a child session through the ChildSessions port."""

    spec = SPEC

    def __init__(self, children: ChildSessions, *, builtin_names: frozenset[str], timeout_seconds: float) -> None:
        self._children = children
        self._builtin_names = builtin_names
        self.spec = replace(SPEC, timeout_seconds=timeout_seconds)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        parent = self._children.loaded(context.tenant, context.session_id)
        if parent is None:
            raise ToolFailure("Subagent failed: the parent session is not loaded")
        label = str(arguments.get("label") or "")
        child_id = f"{context.session_id}:sub:{secrets.token_hex(4)}"
        parent_key = parent.record.identity.session_key or context.session_id
        child = _Child(
            session_id=child_id, session_key=f"{parent_key}:subagent:{child_id}", agent_id=label or "subagent"
        )
        hooks = parent.hooks
        spawn_event: dict[str, Any] = {
            "childSessionKey": child.session_key,
            "agentId": child.agent_id,
            "label": label,
            "mode": "run",
            "threadRequested": False,
        }
        subagent_context: dict[str, Any] = {"childSessionKey": child.session_key, "requesterSessionKey": parent_key}
        spawning = await hooks.run("subagent_spawning", spawn_event, context.run_id, **subagent_context)
        if spawning is not None and spawning.result is not None and spawning.result.get("status") == "error":
            error = str(spawning.result.get("error") or "Subagent spawning blocked by hook")
            raise ToolFailure(f"Subagent failed: {error}", {"childSessionId": child_id, "ok": False, "error": error})
        await hooks.run(
            "subagent_delivery_target",
            {
                "childSessionKey": child.session_key,
                "requesterSessionKey": parent_key,
                "expectsCompletionMessage": True,
            },
            context.run_id,
            **subagent_context,
        )
        await self._create(parent, child, arguments, context)
        hooks.fire("subagent_spawned", {**spawn_event, "runId": context.run_id}, context.run_id, **subagent_context)
        ok = False
        error = ""
        try:
            finished, text = await self._run_child(child, str(arguments["task"]), context)
            ok = finished.outcome is RunOutcome.COMPLETED
            if not ok:
                why = finished.error.message if finished.error is not None else ""
                reason = finished.reason.value if finished.reason is not None else finished.outcome.value
                error = why or f"the subagent's run ended {reason}"
        finally:
            hooks.fire(
                "subagent_ended",
                {
                    "targetSessionKey": child.session_key,
                    "targetKind": "subagent",
                    "reason": "completed" if ok else "error",
                    "outcome": "ok" if ok else "error",
                    "runId": context.run_id,
                    "endedAt": utcnow().isoformat(),
                },
                context.run_id,
                **subagent_context,
            )
            await self._end_child(context.tenant, child_id)
        if not ok:
            raise ToolFailure(f"Subagent failed: {error}", {"childSessionId": child_id, "ok": False, "error": error})
        return ToolOutcome.text(text or "(the subagent gave no text)", {"childSessionId": child_id, "ok": True})

    async def _end_child(self, tenant: str, child_id: str) -> None:
        loaded = self._children.loaded(tenant, child_id)
        if loaded is not None:
            await loaded.end_session_hooks(wait=False)

    async def _create(
        self, parent: ParentSession, child: _Child, arguments: Mapping[str, Any], context: ToolContext
    ) -> None:
        parent_config = parent.record.config
        tools = [n for n in parent.toolset().names() if n in self._builtin_names and n != TOOL_NAME]
        wanted = arguments.get("allowedTools")
        if isinstance(wanted, list):
            unknown = sorted(set(wanted) - set(tools))
            if unknown:
                raise ToolFailure(f"Subagent failed: tools not available to a subagent: {', '.join(unknown)}")
            tools = [n for n in tools if n in wanted]
        config = replace(
            parent_config,
            system_prompt=str(arguments["instructions"]),
            model_ref=str(arguments.get("modelRef") or parent_config.model_ref),
            # An empty allowed list means "everything" to the catalog; a child allowed nothing gets a name
            # that matches no tool instead.
            allowed_tools=tuple(tools) or ("(none)",),
            hosted_tools=(),
            mcp_servers={},
            disabled_mcp_servers=(),
            hook_registrations=(),
        )
        await self._children.create(
            context.tenant,
            parent_session_id=context.session_id,
            identity=SessionIdentity(
                mode=parent.record.identity.mode, session_id=child.session_id, session_key=child.session_key
            ),
            config=config,
            agent_id=child.agent_id,
        )

    async def _run_child(self, child: _Child, task: str, context: ToolContext) -> tuple[RunFinished, str]:
        """One turn of the child; the parent's stop or cancel (CancelledError here) stops it too."""
        stream = self._children.run(context.tenant, child.session_id, task)
        finished: RunFinished | None = None
        try:
            async for event in stream:
                if isinstance(event.body, RunFinished):
                    finished = event.body
        except asyncio.CancelledError:
            await asyncio.shield(self._children.stop(context.tenant, child.session_id))
            raise
        finally:
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()
        if finished is None:
            raise ToolFailure("Subagent failed: the subagent's run did not finish")
        return finished, self._children.last_text(context.tenant, child.session_id)
