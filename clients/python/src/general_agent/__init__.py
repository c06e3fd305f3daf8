"""Python client for the General Agent Service.

- :class:`AgentClient`: the async client (``await AgentClient.connect(address)``).
- :class:`AgentError` and subclasses: failed calls with their decoded ErrorInfo / BadRequest / RetryInfo.
- :class:`HookServer`: serve ``HookService`` from decorated async handlers and register them.
- :mod:`general_agent.events`: helpers over ``SessionEvent`` and the forward-compatibility rule.
- :mod:`general_agent.event_types`: one dataclass per event variant, for ``match`` (:func:`to_event`).
- :class:`Run` (``client.run()``): a run over RunSession with hosted tools and approvals answered.
- :mod:`general_agent.sync`: a blocking facade for scripts and notebooks.
- :mod:`general_agent.v1`: the generated messages and stubs.
- :mod:`general_agent.testing`: test doubles (a fake Anthropic server; needs the ``testing`` extra).
"""

from __future__ import annotations

from general_agent.client import DEFAULT_TIMEOUT, RPC_METHODS, AgentClient, Image, TurnResult, mcp_http, mcp_stdio
from general_agent.errors import (
    AgentError,
    ApprovalPending,
    CheckpointNotFound,
    EventsExpired,
    IdentityMismatch,
    InvalidHook,
    InvalidPageToken,
    McpServerNotFound,
    NoApiKey,
    PermissionDenied,
    RequestIdReused,
    ResourceLimit,
    SessionAlreadyExists,
    SessionBusy,
    SessionNotFound,
    ShuttingDown,
    SlowConsumer,
    ToolCallAlreadyResolved,
    Unauthenticated,
    UnknownToolCall,
)
from general_agent.event_types import (
    ApprovalRequested,
    ApprovalResolved,
    AssistantDelta,
    CompactionFinished,
    CompactionStarted,
    Event,
    HostedToolCall,
    MessageInjected,
    ReasoningDelta,
    ReasoningEnd,
    RunFinished,
    RunStarted,
    RunUsage,
    SessionReset,
    ToolCall,
    ToolError,
    ToolResult,
    TurnComplete,
    UnknownEvent,
    UsageUpdate,
    to_event,
)
from general_agent.events import (
    KNOWN_KINDS,
    aiter_known,
    event_kind,
    is_known,
    is_run_finished,
    is_terminal,
    iter_known,
    outcome_name,
    text_of,
)
from general_agent.hooks import HookServer
from general_agent.runner import ApprovalAnswer, Run, RunResult

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TIMEOUT",
    "KNOWN_KINDS",
    "RPC_METHODS",
    "AgentClient",
    "AgentError",
    "ApprovalAnswer",
    "ApprovalPending",
    "ApprovalRequested",
    "ApprovalResolved",
    "AssistantDelta",
    "CheckpointNotFound",
    "CompactionFinished",
    "CompactionStarted",
    "Event",
    "EventsExpired",
    "HookServer",
    "HostedToolCall",
    "IdentityMismatch",
    "Image",
    "InvalidHook",
    "InvalidPageToken",
    "McpServerNotFound",
    "MessageInjected",
    "NoApiKey",
    "PermissionDenied",
    "ReasoningDelta",
    "ReasoningEnd",
    "RequestIdReused",
    "ResourceLimit",
    "Run",
    "RunFinished",
    "RunResult",
    "RunStarted",
    "RunUsage",
    "SessionAlreadyExists",
    "SessionBusy",
    "SessionNotFound",
    "SessionReset",
    "ShuttingDown",
    "SlowConsumer",
    "ToolCall",
    "ToolCallAlreadyResolved",
    "ToolError",
    "ToolResult",
    "TurnComplete",
    "TurnResult",
    "Unauthenticated",
    "UnknownEvent",
    "UnknownToolCall",
    "UsageUpdate",
    "__version__",
    "aiter_known",
    "event_kind",
    "is_known",
    "is_run_finished",
    "is_terminal",
    "iter_known",
    "mcp_http",
    "mcp_stdio",
    "outcome_name",
    "text_of",
    "to_event",
]
