"""Helpers over ``general_agent.v1.SessionEvent``.

A ``SessionEvent`` is ``{sequence, session_id, run_id, create_time, oneof event}``; the name of the
set ``oneof`` field is the event's *kind* (``"run_started"``, ``"assistant_delta"``,
``"tool_call"``, ``"run_finished"`` ...). Every run starts with ``run_started`` and ends with exactly
one terminal ``run_finished`` (COMPLETED, STOPPED or FAILED); each suspension for hosted tools emits a
non-terminal ``run_finished{SUSPENDED}``.

Forward-compatibility rule: the server adds new event variants without a version change, and clients
MUST skip variants they do not know. An event of a variant newer than this client's generated code
arrives with no ``oneof`` field set (its payload is kept as an unknown field), so
:func:`event_kind` returns ``""`` for it. :func:`iter_known` and :func:`aiter_known` drop such events;
code that dispatches on :func:`event_kind` should ignore kinds it does not handle rather than fail.
The ``sequence`` of a skipped event still counts as seen: resume a watch after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

from general_agent.v1 import event_pb2

__all__ = [
    "KNOWN_KINDS",
    "aiter_known",
    "event_kind",
    "is_known",
    "is_run_finished",
    "is_terminal",
    "iter_known",
    "outcome_name",
    "text_of",
]

SessionEvent = event_pb2.SessionEvent

KNOWN_KINDS: frozenset[str] = frozenset(field.name for field in SessionEvent.DESCRIPTOR.oneofs_by_name["event"].fields)
"""The event kinds this client's generated code knows."""

_OUTCOME_PREFIX = "RUN_OUTCOME_"


def event_kind(event: SessionEvent) -> str:
    """The name of the event's set variant (``WhichOneof("event")``), or ``""`` for an unknown one."""
    return event.WhichOneof("event") or ""


def is_known(event: SessionEvent) -> bool:
    """True when the event carries a variant this client knows."""
    return event_kind(event) in KNOWN_KINDS


def is_run_finished(event: SessionEvent) -> bool:
    """True for any ``run_finished``, terminal or SUSPENDED."""
    return event_kind(event) == "run_finished"


def is_terminal(event: SessionEvent) -> bool:
    """True for a ``run_finished`` that ends its run (outcome other than SUSPENDED)."""
    return is_run_finished(event) and event.run_finished.outcome != event_pb2.RUN_OUTCOME_SUSPENDED


def outcome_name(event: SessionEvent) -> str:
    """``"COMPLETED"``, ``"SUSPENDED"``, ``"STOPPED"`` or ``"FAILED"`` for a ``run_finished`` event
    (the number as a string for an outcome newer than this client), else ``""``."""
    if not is_run_finished(event):
        return ""
    value = event.run_finished.outcome
    try:
        name = event_pb2.RunOutcome.Name(value)
    except ValueError:
        return str(int(value))
    return name.removeprefix(_OUTCOME_PREFIX)


def iter_known(events: Iterable[SessionEvent]) -> Iterator[SessionEvent]:
    """Yields the events whose variant this client knows, skipping the others (forward compatibility)."""
    return (event for event in events if is_known(event))


async def aiter_known(events: AsyncIterable[SessionEvent]) -> AsyncIterator[SessionEvent]:
    """Async form of :func:`iter_known`, e.g. over ``client.stream_turn(...)`` or ``client.watch(...)``."""
    async for event in events:
        if is_known(event):
            yield event


def text_of(events: Iterable[SessionEvent], kind: str = "assistant_delta") -> str:
    """The concatenated text of the ``assistant_delta`` (or ``reasoning_delta``) events."""
    if kind not in ("assistant_delta", "reasoning_delta"):
        raise ValueError(f"text_of() takes 'assistant_delta' or 'reasoning_delta', not {kind!r}")
    if kind == "assistant_delta":
        return "".join(e.assistant_delta.text for e in events if event_kind(e) == kind)
    return "".join(e.reasoning_delta.text for e in events if event_kind(e) == kind)
