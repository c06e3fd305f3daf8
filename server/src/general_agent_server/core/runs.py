"""Durable records of runs and idempotency keys."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from general_agent_server.core.events import RunOutcome, RunReason, RunTrigger
from general_agent_server.core.session import Usage


class RunStatus(enum.Enum):
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    FINISHED = "FINISHED"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    tenant: str
    session_id: str
    run_id: str
    trigger: RunTrigger
    status: RunStatus
    started_at: datetime
    first_sequence: int
    model_ref: str
    request_id: str = ""
    body_hash: str = ""
    outcome: RunOutcome | None = None
    reason: RunReason | None = None
    last_sequence: int = 0
    finished_at: datetime | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyRecord:
    """A remembered mutating request: same key and body ⇒ the same result; another body ⇒ an error."""

    tenant: str
    rpc: str
    request_id: str
    body_hash: str
    result_json: str
    create_time: datetime
