"""What the server's parts report, when an observer is attached (observability/metrics.py implements it).
Each part holds `Observer | None`; None, the default, means one attribute check per event and nothing else."""

from __future__ import annotations

from typing import Protocol

from general_agent_server.domain.session import Usage


class Observer(Protocol):
    def rpc(self, method: str, code: str, seconds: float) -> None:
        """One RPC ended with `code` (a gRPC status name)."""

    def model_call(self, model: str, seconds: float, usage: Usage | None, failed: bool) -> None:
        """One model request ended (usage None when it failed before its message completed)."""

    def tool_call(self, tool: str, seconds: float, failed: bool) -> None:
        """One tool outcome (local, MCP, hosted, blocked or unknown)."""

    def hook_call(self, hook: str, seconds: float, failed: bool) -> None:
        """One hook handler call (in-process or remote)."""

    def run_ended(self, outcome: str) -> None:
        """A run reached its terminal run_finished with `outcome` (COMPLETED, FAILED, STOPPED ...)."""

    def store_commit(self, seconds: float, batch_size: int) -> None:
        """One group commit of the store's writer: how long, and how many write batches it carried."""
