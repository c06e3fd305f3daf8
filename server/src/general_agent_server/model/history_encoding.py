"""A session's model history as Messages API messages, with the JSON of every closed message kept across calls.

Every call of a session resends the whole history. Building its API messages and encoding them again costs time and
allocations in proportion to the history (and a long history's transient objects push the garbage collector into
full collections); a session's calls instead share one `HistoryEncoding`, so a call builds and encodes only what the
history gained since the previous call (usually the last assistant message and the new user message).

A message is *closed* once a non-empty message of the other role follows it: the request builder never merges it
with later content again (model/request_builder.py merges consecutive messages of one role). The closed prefix ends
at the latest user message at the most, so the request's cache breakpoint (on that message's last block) is always
set on a per-call copy, never on a kept message. What is kept is checked against the history of every call: the
kept source messages must still open the history (by identity; a compaction, reset or reload replaces them) and the
model family must be the same (thinking blocks are kept for the family that wrote them); anything else starts again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from general_agent_server.domain.history import HistoryMessage
from general_agent_server.model.catalog import capabilities
from general_agent_server.model.port import EncodedPrefix
from general_agent_server.model.wire_body import dumps

_THINKING_TYPES = ("thinking", "redacted_thinking")


class HistoryEncoding:
    """The closed prefix of one session's history (see the module docstring). Not shared between sessions."""

    __slots__ = ("_family", "_json", "_messages", "_opener", "_source")

    def __init__(self) -> None:
        self._family = ""
        self._source: list[HistoryMessage] = []  # the history messages the kept API messages came from
        self._opener: HistoryMessage | None = None  # the message after them, which closed the last of them
        self._messages: list[dict[str, Any]] = []
        self._json = b""

    @property
    def kept_bytes(self) -> int:
        return len(self._json)

    def split(
        self, history: Sequence[HistoryMessage], model_ref: str, stable: int
    ) -> tuple[list[dict[str, Any]], EncodedPrefix, int]:
        """For a call with `history`: the closed prefix's API messages (the caller copies them: the list grows with
        later calls) and their JSON, and the index of the first history message after them. The prefix is extended
        up to `stable` at the most (the history from there on may read differently in this call)."""
        family = capabilities(model_ref).family
        if family != self._family or stable < len(self._source) or not self._opens(history):
            self._family, self._source, self._opener, self._messages, self._json = family, [], None, [], b""
        self._extend(history, min(stable, len(history)))
        return self._messages, EncodedPrefix(count=len(self._messages), json=self._json), len(self._source)

    def _opens(self, history: Sequence[HistoryMessage]) -> bool:
        kept = len(self._source)
        if kept == 0:
            return True
        if len(history) <= kept or history[kept] is not self._opener:
            return False
        # Cheap refusals first: a replaced history has new objects at its ends.
        if history[0] is not self._source[0] or history[kept - 1] is not self._source[-1]:
            return False
        prefix = history[:kept]  # a list for the ledger's history: compared without a second copy
        return (prefix if isinstance(prefix, list) else list(prefix)) == self._source

    def _extend(self, history: Sequence[HistoryMessage], stable: int) -> None:
        """Closes the messages of history[len(source):stable] that a later non-empty message of the other role
        follows; the last one stays open (the next call's history may add to it)."""
        start = len(self._source)
        if stable <= start:
            return
        built: list[tuple[int, dict[str, Any]]] = []  # (history index where it starts, API message)
        for index in range(start, stable):
            message = history[index]
            content = api_content(message, self._family)
            if not content:
                continue
            if built and built[-1][1]["role"] == message.role:
                built[-1][1]["content"].extend(content)
            else:
                built.append((index, {"role": message.role, "content": list(content)}))
        if len(built) < 2:
            return
        opener_index = built[-1][0]
        closed = [message for _, message in built[:-1]]
        encoded = b",".join([dumps(message) for message in closed])
        self._json = self._json + b"," + encoded if self._json else encoded
        self._messages.extend(closed)
        self._source.extend(history[start:opener_index])
        self._opener = history[opener_index]


def api_content(message: HistoryMessage, family: str) -> tuple[dict[str, Any], ...]:
    """The message's blocks as a request to a model of `family` takes them: thinking blocks only for the family
    that wrote them."""
    if message.role == "assistant" and message.model_ref and capabilities(message.model_ref).family != family:
        return tuple(b for b in message.content if b.get("type") not in _THINKING_TYPES)
    return message.content
