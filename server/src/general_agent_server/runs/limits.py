"""A run's limits: the session's own where it sets one, never above the server's (docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ErrorDetail
from general_agent_server.domain.events import RunReason, StopReason
from general_agent_server.domain.session import SessionLimits
from general_agent_server.runs.state import Failed
from general_agent_server.sessions.settings import CoreSettings


@dataclass(frozen=True, kw_only=True, slots=True)
class RunLimits:
    model_calls: int
    tool_calls: int
    deadline_seconds: float

    def remaining_seconds(self, started_at: datetime) -> float:
        return max(0.0, self.deadline_seconds - (utcnow() - started_at).total_seconds())


def run_limits(session: SessionLimits, settings: CoreSettings) -> RunLimits:
    return RunLimits(
        model_calls=min(
            session.max_model_calls_per_run or settings.max_model_calls_per_run, settings.max_model_calls_per_run
        ),
        tool_calls=min(
            session.max_tool_calls_per_run or settings.max_tool_calls_per_run, settings.max_tool_calls_per_run
        ),
        deadline_seconds=min(session.run_deadline_seconds or settings.run_deadline, settings.run_deadline),
    )


def limit_reached(reason: RunReason, setting: str, limit: int, stop_reason: StopReason | None) -> Failed:
    return Failed(
        reason=reason,
        detail=ErrorDetail(
            code=ErrorCode.RESOURCE_EXHAUSTED,
            reason=reason.value,
            message=f"the run reached {setting} ({limit})",
            metadata={"limit": str(limit)},
        ),
        stop_reason=stop_reason,
    )


def deadline_exceeded(deadline_seconds: float, stop_reason: StopReason | None) -> Failed:
    return Failed(
        reason=RunReason.RUN_DEADLINE_EXCEEDED,
        detail=ErrorDetail(
            code=ErrorCode.DEADLINE_EXCEEDED,
            reason="RUN_DEADLINE_EXCEEDED",
            message=f"the run exceeded run_deadline ({deadline_seconds:g}s)",
        ),
        stop_reason=stop_reason,
    )
