"""Helpers to assert on event streams independent of delta coalescing (consecutive deltas of one kind
may arrive merged when the consumer lags)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# The concatenated text of a stream's assistant (or reasoning) deltas: the Python client's helper.
from general_agent.events import text_of

__all__ = [
    "ONE_TOOL_ERROR_THEN_TEXT",
    "ONE_TOOL_THEN_TEXT",
    "RESULT_THEN_INJECTED",
    "RESULT_THEN_TEXT",
    "TEXT_ANSWER",
    "TEXT_RUN",
    "TEXT_THEN_INJECTED",
    "kinds",
    "last_of",
    "sequences",
    "text_of",
]


def kinds(events: Iterable[Any]) -> list[str]:
    """Event kinds with runs of the same delta kind collapsed to one."""
    out: list[str] = []
    for event in events:
        kind = event.WhichOneof("event")
        if kind in ("assistant_delta", "reasoning_delta") and out and out[-1] == kind:
            continue
        out.append(kind)
    return out


def last_of(events: list[Any], kind: str) -> Any:
    matching = [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]
    assert matching, f"no {kind} event in {kinds(events)}"
    return matching[-1]


def sequences(events: Iterable[Any]) -> list[int]:
    return [int(e.sequence) for e in events]


# One model call answered with text: its deltas, its usage, the end of its turn.
TEXT_ANSWER = ["assistant_delta", "usage_snapshot", "turn_complete"]

# The events of a turn with one local tool call, then a text answer (docs/protocol.md, "Turns and events").
ONE_TOOL_THEN_TEXT = [
    "run_started",
    "usage_snapshot",
    "tool_call",
    "tool_result",
    "turn_complete",
    *TEXT_ANSWER,
    "run_finished",
]

# The same turn when the tool call fails (unknown tool, invalid arguments): the model is told and answers.
ONE_TOOL_ERROR_THEN_TEXT = [
    "run_started",
    "usage_snapshot",
    "tool_call",
    "tool_error",
    "turn_complete",
    *TEXT_ANSWER,
    "run_finished",
]

# The events of a run that answers with text and no tool call.
TEXT_RUN = ["run_started", *TEXT_ANSWER, "run_finished"]

# A text turn, then a message injected while it ran, answered by one more model call.
TEXT_THEN_INJECTED = ["run_started", *TEXT_ANSWER, "message_injected", *TEXT_ANSWER, "run_finished"]

# A hosted tool result that continues a suspended run, answered with text.
RESULT_THEN_TEXT = ["tool_result", "turn_complete", *TEXT_ANSWER, "run_finished"]

# A hosted tool result that continues a suspended run, with a message injected while it was suspended.
RESULT_THEN_INJECTED = ["tool_result", "turn_complete", "message_injected", *TEXT_ANSWER, "run_finished"]
