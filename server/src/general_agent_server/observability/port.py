"""What the server's parts report, when an observer is attached (observability/metrics.py implements it).
Each part holds `Observer | None`; None, the default, means one attribute check per event and nothing else.
`Spans` (observability/tracing.py) is the same for the spans open while a hook handler or a tool runs: what it
calls out to (a hook service, an MCP server) is sent the trace context of that span."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from general_agent_server.domain.session import Usage


class Observer(Protocol):
    def rpc(self, method: str, code: str, seconds: float) -> None:
        """One RPC ended with `code` (a gRPC status name)."""

    def model_call(self, model: str, seconds: float, usage: Usage | None, failed: bool) -> None:
        """One model request ended (usage None when it failed before its message completed)."""

    def tool_call(self, tool: str, seconds: float, failed: bool, *, spanned: bool = False) -> None:
        """One tool outcome (local, MCP, hosted, blocked or unknown); `spanned` when it ran under a span of
        `Spans` (a local call), which then is its span."""

    def hook_call(self, hook: str, seconds: float, failed: bool) -> None:
        """One hook handler call (in-process or remote)."""

    def run_ended(self, outcome: str) -> None:
        """A run reached its terminal run_finished with `outcome` (COMPLETED, FAILED, STOPPED ...)."""

    def store_commit(self, seconds: float, batch_size: int) -> None:
        """One group commit of the store's writer: how long, and how many write batches it carried."""


class LiveSpan(Protocol):
    def failed(self) -> None:
        """Marks the span's call as failed (an error the caller caught, so nothing was raised through it)."""


class Spans(Protocol):
    """Spans current while the block runs: what the block sends out carries their trace context."""

    def hook(self, hook: str, plugin_id: str) -> AbstractContextManager[LiveSpan]:
        """One hook handler call (in-process or remote)."""

    def tool(self, tool: str) -> AbstractContextManager[LiveSpan]:
        """One local tool call (built-in or MCP)."""
