"""What a RunSession stream carries, in domain terms (docs/protocol.md, RunSession): the attach, the commands a
host sends, and what the server sends back. The transport converts protobuf to these and back (api/)."""

from __future__ import annotations

from dataclasses import dataclass, field

from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.errors import ServiceError
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.records import CallResult
from general_agent_server.runs.approvals import ApprovalAnswer
from general_agent_server.runs.state import OnDisconnect, TurnOptions
from general_agent_server.sessions.idempotency import Idempotency


@dataclass(frozen=True, kw_only=True, slots=True)
class Attach:
    session_id: str
    after_sequence: int | None = None
    on_disconnect: OnDisconnect = OnDisconnect.CANCEL


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnCommand:
    command_id: str
    parts: tuple[ContentPart, ...]
    options: TurnOptions = field(default_factory=TurnOptions)
    idem: Idempotency | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HostedResultCommand:
    command_id: str
    call_id: str
    result: CallResult


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolveApprovalCommand:
    command_id: str
    call_id: str
    answer: ApprovalAnswer


@dataclass(frozen=True, kw_only=True, slots=True)
class InjectCommand:
    command_id: str
    parts: tuple[ContentPart, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class StopCommand:
    command_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ClearStopCommand:
    command_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelCommand:
    command_id: str
    run_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class PingCommand:
    pass


@dataclass(frozen=True, kw_only=True, slots=True)
class RejectedCommand:
    """A command the transport could not decode: it is answered with its error; the stream goes on."""

    command_id: str
    error: ServiceError


Command = (
    TurnCommand
    | HostedResultCommand
    | ResolveApprovalCommand
    | InjectCommand
    | StopCommand
    | ClearStopCommand
    | CancelCommand
    | PingCommand
    | RejectedCommand
)


@dataclass(frozen=True, kw_only=True, slots=True)
class EventOut:
    event: SequencedEvent


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandOut:
    command_id: str
    error: ServiceError | None = None
    run_id: str = ""
    accepted: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatOut:
    last_sequence: int


Output = EventOut | CommandOut | HeartbeatOut
