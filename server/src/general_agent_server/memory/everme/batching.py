"""Uploads of more than 500 messages split in source order (docs/memory.md, "The EverMe backend"): each batch
is cut at the latest completed turn within its 500 messages, failing that after the latest complete tool
call/result group, failing that at the hard limit. Every message is in exactly one batch, in order.

A turn closes after an assistant message without tool calls, with no call pending, when the next message is
the user's or the message says `turn_complete`; an explicit `turn_complete=False` never closes one. A tool
group is complete after a result when no call is pending and the next message is not a result as well."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from general_agent_server.memory.types import MemoryMessage

MAX_BATCH = 500
TURN, TOOL = 2, 1


def boundaries(messages: Sequence[MemoryMessage]) -> list[int]:
    """For each i, the strength of a cut after message i: TURN, TOOL or 0."""
    pending: Counter[str] = Counter()
    strength = [0] * len(messages)
    for i, message in enumerate(messages):
        if message.role == "assistant":
            pending.update(call.id for call in message.tool_calls)
        elif message.role == "tool" and pending[message.tool_call_id] > 0:
            pending[message.tool_call_id] -= 1
        following = messages[i + 1] if i + 1 < len(messages) else None
        open_calls = +pending
        if message.role == "assistant" and not message.tool_calls and not open_calls:
            closes = message.turn_complete is True or (following is not None and following.role == "user")
            if message.turn_complete is not False and closes:
                strength[i] = TURN
        elif message.role == "tool" and not open_calls and (following is None or following.role != "tool"):
            strength[i] = TOOL
    return strength


def split(messages: Sequence[MemoryMessage], limit: int = MAX_BATCH) -> list[tuple[int, int]]:
    """The batches as [start, end) ranges; one empty range for no messages (a flush-only upload)."""
    if not messages:
        return [(0, 0)]
    strength = boundaries(messages)
    ranges: list[tuple[int, int]] = []
    start = 0
    while start < len(messages):
        end = min(start + limit, len(messages))
        if end < len(messages):
            window = range(end - 1, start - 1, -1)
            cut = next((i + 1 for i in window if strength[i] == TURN), 0) or next(
                (i + 1 for i in window if strength[i] == TOOL), 0
            )
            end = cut or end
        ranges.append((start, end))
        start = end
    return ranges


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchFlags:
    flush: bool
    sync: bool
    turns: int


def flags(count: int, *, flush: bool, sync: bool, turns: int) -> list[BatchFlags]:
    """`flush` only on the last batch; when the upload flushes, every leading batch carries `sync` so the
    gateway has added them before the flush; an upload that does not flush never forces `sync`. `turns`
    (the turns the upload completes) rides on the last batch, the others carry 0."""
    out = []
    for index in range(count):
        last = index == count - 1
        out.append(BatchFlags(flush=flush and last, sync=sync or (flush and not last), turns=turns if last else 0))
    return out
