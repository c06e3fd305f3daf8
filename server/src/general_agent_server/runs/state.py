"""The state of one run and the small value types around it: what a turn asks for, how it entered the session,
the run itself from admission to its terminal run_finished, and the typed next step of the agent loop.

Ownership (docs/architecture.md, "The run's invariants"): an `ActiveRun` belongs to its `LiveSession`. While the
run's task is alive only its driver changes it; while the run is suspended (no task) only commands applied under
the session's command lock do."""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from general_agent_server.domain.content import ContentPart, TextPart
from general_agent_server.domain.errors import ErrorDetail
from general_agent_server.domain.events import RunOutcome, RunReason, RunTrigger, SequencedEvent, StopReason
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import CallKind, CallResult, CallStatus, ResolvedBy, RunRecord, ToolCallRecord
from general_agent_server.domain.session import Usage
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.model.port import Credential


class BusyPolicy(enum.Enum):
    """What a turn does when the session already has a run (docs/protocol.md, busy policies)."""

    REJECT = "REJECT"
    ENQUEUE = "ENQUEUE"
    INTERRUPT = "INTERRUPT"
    STEER = "STEER"


class OnDisconnect(enum.Enum):
    """What happens to the runs a stream started when the stream goes away."""

    CANCEL = "CANCEL"
    CONTINUE = "CONTINUE"


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnOptions:
    busy_policy: BusyPolicy = BusyPolicy.REJECT
    on_disconnect: OnDisconnect = OnDisconnect.CANCEL


@dataclass(kw_only=True)
class TurnRequest:
    """A validated turn: the user's parts and its idempotency identity."""

    parts: tuple[ContentPart, ...]
    request_id: str = ""
    body_hash: str = ""
    trigger: RunTrigger = RunTrigger.TURN


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelHookAnswers:
    """What before_model_resolve and the legacy before_agent_start answered for a run (or how they failed:
    a fail-closed failure fails the run HOOK_FAILED once it is admitted)."""

    model_ref: str
    legacy: dict[str, Any] | None = None
    failure: Exception | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptPlan:
    """What the model and prompt hooks decided for a run, kept for every model call of it (continuations after
    a suspension included): the model, the system prompt (None: the session's) and the ephemeral
    prependContext, which is never stored in the user message."""

    model_ref: str
    system_prompt: str | None = None
    prepend_context: str = ""


@dataclass(kw_only=True)
class ActiveRun:
    """A run from admission to its terminal run_finished. While SUSPENDED it has no task."""

    run_id: str
    record: RunRecord
    model_ref: str
    credential: Credential | None
    task: asyncio.Task[None] | None = None
    stop_reason: RunReason | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    # The first model request starts while the admission commits; nothing is emitted before it has.
    admitted: asyncio.Event = field(default_factory=asyncio.Event)
    admission_failed: bool = False
    # The calls of the current tool round (the pending hosted calls while SUSPENDED).
    round: list[ToolCallRecord] = field(default_factory=list)
    prompt: PromptPlan | None = None
    # The model hooks' answers, asked at admission so that run_started names the model the run uses.
    model_hooks: ModelHookAnswers | None = None

    def pending(self) -> list[ToolCallRecord]:
        """The round's calls without a result: to run, waiting for a host, or waiting for approval."""
        return [r for r in self.round if r.status is not CallStatus.RESOLVED]

    def waiting(self) -> list[ToolCallRecord]:
        """What a suspended run waits on: hosted calls without a result and calls waiting for approval."""
        return [
            r
            for r in self.round
            if r.status is CallStatus.AWAITING_APPROVAL
            or (r.status is CallStatus.PENDING and r.kind is CallKind.HOSTED)
        ]

    def replace_call(self, resolved: ToolCallRecord) -> None:
        self.round = [resolved if r.call_id == resolved.call_id else r for r in self.round]


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """How a turn entered the session: a run it started, or the run it steered."""

    run: ActiveRun | None
    steered_run_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Resolution:
    """What resolving a hosted call did: the sequence of its tool_result/tool_error, whether it was an
    identical replay of an earlier submit (the caller replays the log from that sequence), and the run it
    continued when it was the round's last pending call."""

    sequence: int
    replay: bool = False
    continued: ActiveRun | None = None


_STOP_MESSAGES = {
    RunReason.SUPERSEDED: ("superseded by a new turn", ResolvedBy.SUPERSEDED),
    RunReason.SESSION_RESET: ("cancelled: session reset", ResolvedBy.RESET),
    RunReason.SESSION_DELETED: ("cancelled: session deleted", ResolvedBy.STOP),
    RunReason.INTERRUPTED: ("cancelled: server shutting down", ResolvedBy.INTERRUPTED),
}


def stop_message(reason: RunReason) -> tuple[str, ResolvedBy]:
    """The is_error result text an unfinished call gets when its run stops for `reason`, and how it resolved."""
    return _STOP_MESSAGES.get(reason, ("cancelled: run stopped", ResolvedBy.STOP))


def payload_hash(result: CallResult) -> str:
    """The digest an identical resubmission of a hosted result is recognised by."""
    text = json.dumps(
        {
            "content": [
                p.text if isinstance(p, TextPart) else {"image": hashlib.sha256(p.data).hexdigest()}
                for p in result.content
            ],
            "details": result.details_json,
            "error": result.is_error,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def first_text(result: CallResult, default: str = "Tool execution failed") -> str:
    """The error text of a failed result: its first non-empty text part."""
    return next((p.text for p in result.content if isinstance(p, TextPart) and p.text), default)


@dataclass(kw_only=True)
class DriverState:
    """What one driver task keeps while it executes a run (or its continuation after a suspension)."""

    usage: Usage
    # The request of the first model call is built from this history while the admission commits.
    first_history: list[HistoryMessage] | None = None
    # A tool round's results commit still landing while the next model request goes out (the request only
    # reads `next_history`); nothing of that call is emitted before it has landed.
    landing: asyncio.Future[None] | None = None
    next_history: list[HistoryMessage] | None = None
    landing_round: list[ToolCallRecord] = field(default_factory=list)
    # The round's last local result, committed with the round's results message (one commit fewer a round).
    carry: tuple[list[SequencedEvent], list[TranscriptEntry], list[ToolCallRecord]] = field(
        default_factory=lambda: ([], [], [])
    )
    partial_text: list[str] = field(default_factory=list)
    in_model_call: bool = False
    last_stop_reason: StopReason | None = None
    last_call_usage: Usage = field(default_factory=Usage)
    suspended: bool = False
    # The run has compacted once for a context overflow; a second overflow fails it.
    overflow_compacted: bool = False
    overflow_message: str = ""
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    def take_carry(self) -> tuple[list[SequencedEvent], list[TranscriptEntry], list[ToolCallRecord]]:
        carried, self.carry = self.carry, ([], [], [])
        return carried


# ---------------------------------------------------------------------- the loop's next step
@dataclass(frozen=True, kw_only=True, slots=True)
class CallModel:
    """Make the next model call."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunToolRound:
    """The model asked for tools: plan, run and resolve them. `events` and `transcript` are the model call's
    (its usage snapshot and text), committed with the assistant message and the round's calls."""

    tool_uses: tuple[dict[str, Any], ...]
    assistant: HistoryMessage
    events: list[SequencedEvent]
    transcript: list[TranscriptEntry]
    changes: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Compact:
    """The provider refused the request as over the context window: compact once, then call again."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Suspend:
    """Hosted calls are pending: commit SUSPENDED and expose them all."""

    hosted: tuple[ToolCallRecord, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class EndRun:
    """The terminal commit. A COMPLETED end is refused when a steering message arrived just before it; the
    loop then makes one more model call (docs/protocol.md, steering)."""

    outcome: RunOutcome
    reason: RunReason | None = None
    stop_reason: StopReason | None = None
    error: ErrorDetail | None = None
    turn_error: ErrorDetail | None = None
    lead_events: list[SequencedEvent] = field(default_factory=list)
    transcript: list[TranscriptEntry] = field(default_factory=list)
    history: list[HistoryMessage] = field(default_factory=list)
    changes: dict[str, Any] = field(default_factory=dict)
    # The model call's turn_complete went out already (with the lead events, runs/endings.py).
    call_closed: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Failed:
    """The run fails with a reason (limits, refusals, truncation, a fail-closed hook)."""

    reason: RunReason
    detail: ErrorDetail
    stop_reason: StopReason | None


NextStep = CallModel | RunToolRound | Compact | Suspend | EndRun | Failed


class RunFailed(Exception):
    """Raised where a failure is found deep inside a step (a fail-closed hook); the loop turns it into Failed."""

    def __init__(self, failed: Failed) -> None:
        super().__init__(failed.detail.message)
        self.failed = failed
