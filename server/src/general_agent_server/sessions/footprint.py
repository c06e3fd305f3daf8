"""A cheap estimate of the memory one loaded session holds, for the idle-session cache's byte budget
(ActorRegistry). It counts what grows with what hosts send and models write: the model history (its size
as stored), the system prompt, hosted tool schemas and the other JSON-shaped config, plus a fixed
overhead per actor and per message for the Python objects around them.

The history's stored size comes with it from the store when a session loads, so a long history is never
walked on the event loop; messages added later are measured one by one as they arrive (the history only
grows between commits; a reset or compaction replaces it whole, and then it is measured again)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionConfig

# An actor with an empty history: the actor, its record, locks, hooks and toolset objects.
ACTOR_OVERHEAD = 16 * 1024
# The dicts, tuples and strings of one message in memory, beyond its serialised characters.
MESSAGE_OVERHEAD = 256

_encode = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"), default=str).encode


def message_bytes(message: HistoryMessage) -> int:
    return MESSAGE_OVERHEAD + len(_encode(message.content))


def config_bytes(config: SessionConfig) -> int:
    tools = sum(len(t.name) + len(t.description) + len(_encode(t.input_schema)) for t in config.hosted_tools)
    shaped = _encode([config.labels, config.mcp_servers, config.hook_registrations])
    return len(config.system_prompt) + tools + len(shaped)


class SessionFootprint:
    """The running estimate of one actor (see module docstring)."""

    __slots__ = ("_config", "_config_bytes", "_count", "_history_bytes", "_last")

    def __init__(self, history: Sequence[HistoryMessage] = (), stored_bytes: int = 0) -> None:
        """`history` as loaded, with `stored_bytes` its size in the store."""
        self._config: SessionConfig | None = None
        self._config_bytes = 0
        self._count = len(history)
        self._last = history[-1] if history else None
        self._history_bytes = stored_bytes + MESSAGE_OVERHEAD * len(history)

    def estimate(self, config: SessionConfig, history: Sequence[HistoryMessage]) -> int:
        if config is not self._config:  # configs are frozen and replaced whole when they change
            self._config, self._config_bytes = config, config_bytes(config)
        count = len(history)
        grown = count >= self._count and (self._count == 0 or history[self._count - 1] is self._last)
        if not grown:
            self._count, self._history_bytes = 0, 0
        self._history_bytes += sum(message_bytes(history[i]) for i in range(self._count, count))
        self._count = count
        self._last = history[-1] if count else None
        return ACTOR_OVERHEAD + self._config_bytes + self._history_bytes
