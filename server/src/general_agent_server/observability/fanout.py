"""Several observers as one (metrics and tracing both on)."""

from __future__ import annotations

from collections.abc import Sequence

from general_agent_server.domain.session import Usage
from general_agent_server.observability.port import Observer


class Fanout:
    def __init__(self, observers: Sequence[Observer]) -> None:
        self._observers = tuple(observers)

    def rpc(self, method: str, code: str, seconds: float) -> None:
        for o in self._observers:
            o.rpc(method, code, seconds)

    def model_call(self, model: str, seconds: float, usage: Usage | None, failed: bool) -> None:
        for o in self._observers:
            o.model_call(model, seconds, usage, failed)

    def tool_call(self, tool: str, seconds: float, failed: bool, *, spanned: bool = False) -> None:
        for o in self._observers:
            o.tool_call(tool, seconds, failed, spanned=spanned)

    def hook_call(self, hook: str, seconds: float, failed: bool) -> None:
        for o in self._observers:
            o.hook_call(hook, seconds, failed)

    def run_ended(self, outcome: str) -> None:
        for o in self._observers:
            o.run_ended(outcome)

    def store_commit(self, seconds: float, batch_size: int) -> None:
        for o in self._observers:
            o.store_commit(seconds, batch_size)
