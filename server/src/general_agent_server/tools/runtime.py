"""The tool runtime the agent loop uses for every kind of tool (built-in, hosted, MCP): one spec shape
with a JSON Schema, argument validation against it, execution with a timeout and an output cap.

Failures the model should see are `ToolOutcome(is_error=True)`; the loop turns them into `tool_error`
events (docs/protocol.md, "Turns and events": tool_error exactly when the model saw is_error)."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
from general_agent_server.domain.session import SessionRecord
from general_agent_server.security.redaction import redact

logger = logging.getLogger(__name__)


class ToolKind(enum.Enum):
    BUILTIN = "builtin"
    HOSTED = "hosted"
    MCP = "mcp"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """What the model is told about a tool, and how the loop treats it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    kind: ToolKind = ToolKind.BUILTIN
    timeout_seconds: float | None = None
    read_only: bool = True

    def api_definition(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutcome:
    """A tool's result: content blocks for the model, structured details for hosts and hooks."""

    content: tuple[ContentPart, ...]
    details_json: str = ""
    is_error: bool = False

    @property
    def error_text(self) -> str:
        for part in self.content:
            if isinstance(part, TextPart) and part.text:
                return part.text
        return "Tool execution failed"

    @staticmethod
    def error(message: str, details: Any = None) -> ToolOutcome:
        return ToolOutcome(
            content=(TextPart(text=message),),
            details_json=json.dumps(details) if details is not None else "",
            is_error=True,
        )

    @staticmethod
    def text(text: str, details: Any = None) -> ToolOutcome:
        return ToolOutcome(
            content=(TextPart(text=text),), details_json=json.dumps(details) if details is not None else ""
        )


class ToolFailure(Exception):
    """Raised by a tool for a failure the model should see as is_error."""

    def __init__(self, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class MutationRecorder(Protocol):
    """Captures what a mutating call is about to change, so a failure is rolled back and a success can be
    undone later (implemented by workspace/checkpoints/recorder.py CheckpointRecorder)."""

    async def around(
        self,
        context: ToolContext,
        tool_name: str,
        paths: Sequence[Path],
        mutation: Callable[[], Awaitable[ToolOutcome]],
    ) -> ToolOutcome: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    tenant: str
    session_id: str
    run_id: str
    call_id: str
    workspace: Path
    # None: mutating tools run without checkpoints.
    checkpoints: MutationRecorder | None = None


class LocalTool(Protocol):
    """A tool the server executes itself."""

    @property
    def spec(self) -> ToolSpec: ...

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome: ...


@runtime_checkable
class MutatingTool(LocalTool, Protocol):
    """A tool that changes workspace files (write, edit, apply_patch): it names the files a call will touch
    before it runs, so the runtime can checkpoint them. Raises ToolFailure for arguments that name nothing
    valid (the call then fails without running)."""

    def touched_paths(self, arguments: dict[str, Any], context: ToolContext) -> list[Path]: ...


@runtime_checkable
class ToolLifecycle(Protocol):
    """Implemented by tools that own resources outliving one call (background processes): the core tells
    them when a run was cancelled, when a session goes away, and when the server shuts down."""

    async def run_cancelled(self, tenant: str, session_id: str, run_id: str) -> None: ...

    async def session_closed(self, tenant: str, session_id: str) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class ToolLimits:
    max_output_chars: int = 100_000
    default_timeout_seconds: float = 120.0


def truncate_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n\n[output truncated: {limit} of {len(text)} characters shown]"


def cap_output(outcome: ToolOutcome, limit: int) -> ToolOutcome:
    """Caps the text of a result; the notice tells the model (and people) that it was cut."""
    total = sum(len(p.text) for p in outcome.content if isinstance(p, TextPart))
    if total <= limit:
        return outcome
    remaining = limit
    parts: list[ContentPart] = []
    for part in outcome.content:
        if isinstance(part, TextPart):
            kept = part.text[: max(remaining, 0)]
            remaining -= len(kept)
            if kept:
                parts.append(TextPart(text=kept))
        else:
            parts.append(part)
    parts.append(TextPart(text=f"\n\n[output truncated: {limit} of {total} characters shown]"))
    return ToolOutcome(content=tuple(parts), details_json=outcome.details_json, is_error=outcome.is_error)


# Definitions lists by the identities of the specs they were made from: sessions whose tools are the same spec objects
# (every session of one mode offered the built-in tools) share one list, so a request body encodes it once per
# process, not once per session (model/wire_body.py keeps encodings by list identity). An entry holds its specs, so
# their ids are not reused while it exists.
_SHARED_DEFINITIONS: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], list[dict[str, Any]]]] = {}
_SHARED_DEFINITIONS_MAX = 256


def _shared_definitions(specs: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    key = tuple(map(id, specs))
    kept = _SHARED_DEFINITIONS.get(key)
    if kept is not None:
        return kept[1]
    definitions = [spec.api_definition() for spec in specs]
    if len(_SHARED_DEFINITIONS) >= _SHARED_DEFINITIONS_MAX:
        _SHARED_DEFINITIONS.clear()
    _SHARED_DEFINITIONS[key] = (specs, definitions)
    return definitions


class ToolSet:
    """The tools of one session: specs for the model, validators, and the local implementations."""

    def __init__(self, specs: Sequence[ToolSpec], local: Mapping[str, LocalTool], limits: ToolLimits) -> None:
        self._specs = {s.name: s for s in specs}
        self._local = dict(local)
        self._limits = limits
        self._validators: dict[str, Draft202012Validator] = {}
        self._definitions: list[dict[str, Any]] | None = None

    def definitions(self) -> list[dict[str, Any]]:
        """The tools as the model is offered them: one list per set of spec objects, shared by every call and every
        session with those specs (never changed in place), so requests encode it once."""
        if self._definitions is None:
            self._definitions = _shared_definitions(tuple(self._specs.values()))
        return self._definitions

    def names(self) -> list[str]:
        return list(self._specs)

    def lookup(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def validation_error(self, name: str, arguments: Any) -> str | None:
        """A message for the model when the arguments do not match the tool's schema."""
        if not isinstance(arguments, dict):
            return f"Invalid arguments for tool {name}: expected a JSON object"
        validator = self._validators.get(name)
        if validator is None:
            validator = Draft202012Validator(dict(self._specs[name].input_schema))
            self._validators[name] = validator
        error = best_match(validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return f"Invalid arguments for tool {name}: {where}: {error.message}"

    async def execute(self, name: str, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        """Runs a local tool with its timeout and output cap. Cancellation propagates (the run was
        stopped); every other failure becomes an is_error outcome.

        A mutating tool runs inside the context's checkpoint recorder: a failure, a timeout or a cancellation
        (the call did not complete) rolls its files back; a success records a checkpoint."""
        tool = self._local.get(name)
        if tool is None:
            return ToolOutcome.error(f"Tool {name} not found")
        recorder = context.checkpoints
        if recorder is None or not isinstance(tool, MutatingTool):
            outcome = await self._run(name, tool, arguments, context)
        else:
            try:
                paths = tool.touched_paths(arguments, context)
            except ToolFailure as failure:
                outcome = ToolOutcome.error(failure.message, failure.details)
            except Exception as exc:
                outcome = self._unexpected(name, exc)
            else:
                outcome = await recorder.around(context, name, paths, lambda: self._run(name, tool, arguments, context))
        # Redacted before the cap, so a cut never leaves part of a secret behind.
        return cap_output(redact(outcome), self._limits.max_output_chars)

    async def _run(self, name: str, tool: LocalTool, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        timeout = tool.spec.timeout_seconds or self._limits.default_timeout_seconds
        try:
            # asyncio.timeout, not wait_for: a stop that lands as the tool finishes must not be swallowed.
            async with asyncio.timeout(timeout):
                outcome = await tool.run(arguments, context)
        except ToolFailure as failure:
            outcome = ToolOutcome.error(failure.message, failure.details)
        except TimeoutError:
            outcome = ToolOutcome.error(f"Tool {name} timed out after {timeout:g}s")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome = self._unexpected(name, exc)
        return outcome

    @staticmethod
    def _unexpected(name: str, exc: Exception) -> ToolOutcome:
        logger.exception("tool %s failed", name, extra={"category": "tool_result"})
        return ToolOutcome.error(f"Tool {name} failed: {type(exc).__name__}: {exc}")


def image_outcome(data: bytes, mime_type: str, note: str) -> ToolOutcome:
    return ToolOutcome(content=(TextPart(text=note), ImagePart(mime_type=mime_type, data=data)))


class SessionTools(Protocol):
    """Built-in tools that depend on the session's configuration (memory_search and memory_get for a session
    with memory, docs/memory.md)."""

    def tools_for(self, record: SessionRecord) -> Sequence[LocalTool]: ...


@dataclass(frozen=True, kw_only=True)
class ToolCatalog:
    """The server's built-in tools; sessions pick from it by mode and allowed_tools."""

    builtins: Mapping[str, LocalTool] = field(default_factory=dict)
    limits: ToolLimits = field(default_factory=ToolLimits)
    session_tools: SessionTools | None = None
    # Built-in tools a tenant's sessions are not offered (exec without the operator's leave, tenants/rules.py).
    withheld: Callable[[str], frozenset[str]] | None = None

    def for_session(
        self,
        *,
        coding: bool,
        allowed: Sequence[str],
        extra: Sequence[ToolSpec] = (),
        mcp: Sequence[LocalTool] = (),
        record: SessionRecord | None = None,
    ) -> ToolSet:
        """Built-in tools by mode (GENERAL: read-only ones) and `allowed`, then the session's own built-ins
        (`session_tools`, read-only, in every mode, subject to `allowed`); hosted tools (`extra`) as given; MCP
        tools in every mode (the host chose them), subject to `allowed`. An MCP tool never takes a built-in's name."""
        chosen: dict[str, LocalTool] = {}
        own = self.session_tools.tools_for(record) if self.session_tools is not None and record is not None else ()
        withheld = self.withheld(record.tenant) if self.withheld is not None and record is not None else frozenset()
        for name, tool in [*self.builtins.items(), *((t.spec.name, t) for t in own)]:
            if (not coding and not tool.spec.read_only) or name in withheld:
                continue
            if allowed and name not in allowed:
                continue
            chosen[name] = tool
        specs = [t.spec for t in chosen.values()] + list(extra)
        for tool in mcp:
            if (allowed and tool.spec.name not in allowed) or tool.spec.name in chosen:
                continue
            chosen[tool.spec.name] = tool
            specs.append(tool.spec)
        return ToolSet(specs, chosen, self.limits)

    def _lifecycles(self) -> list[ToolLifecycle]:
        return [tool for tool in self.builtins.values() if isinstance(tool, ToolLifecycle)]

    async def run_cancelled(self, tenant: str, session_id: str, run_id: str) -> None:
        for tool in self._lifecycles():
            await tool.run_cancelled(tenant, session_id, run_id)

    async def session_closed(self, tenant: str, session_id: str) -> None:
        for tool in self._lifecycles():
            await tool.session_closed(tenant, session_id)

    async def aclose(self) -> None:
        for tool in self._lifecycles():
            await tool.aclose()
