"""The session resource as the core sees it: plain frozen dataclasses, no protobuf."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from general_agent_server.domain.content import ContentPart

DEFAULT_TENANT = "default"


class SessionMode(enum.Enum):
    GENERAL = "GENERAL"
    CODING = "CODING"


class SessionState(enum.Enum):
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"


class ThinkingMode(enum.Enum):
    """DEFAULT means: adaptive where the model supports it, otherwise off."""

    DEFAULT = "DEFAULT"
    OFF = "OFF"
    ADAPTIVE = "ADAPTIVE"
    BUDGET = "BUDGET"


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionIdentity:
    mode: SessionMode = SessionMode.GENERAL
    session_id: str = ""
    session_key: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ThinkingConfig:
    mode: ThinkingMode = ThinkingMode.DEFAULT
    budget_tokens: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryConfig:
    """Whose memory a session uses (docs/memory.md). `enabled` None means the server's default; 0 for the
    recall fields means the server's value."""

    enabled: bool | None = None
    user_id: str = ""
    agent_id: str = ""
    recall_top_k: int = 0
    recall_budget_chars: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionLimits:
    """Per-session limits; 0 / None means the server's value."""

    max_model_calls_per_run: int = 0
    max_tool_calls_per_run: int = 0
    run_deadline_seconds: float | None = None
    hosted_call_timeout_seconds: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AutoCompaction:
    threshold_pct: int = 0
    cooldown_seconds: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ForkOrigin:
    session_id: str
    at_sequence: int


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageSnapshot:
    """Context usage after the latest model call (session.proto UsageSnapshot)."""

    used_input_tokens: int
    context_window: int
    used_pct: float
    capture_time: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Token accounting; `+` adds two."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    model_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            model_calls=self.model_calls + other.model_calls,
        )

    @property
    def context_input_tokens(self) -> int:
        """What fills the context window: uncached input plus cache reads and writes."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True, kw_only=True, slots=True)
class HostedToolDefinition:
    """A tool the host executes (docs/tools.md, hosted tools); the schema is passed to the model unchanged."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout_seconds: float | None = None


# weakref_slot: the store keeps a config's encoded documents only while the config lives (store/rows.py).
@dataclass(frozen=True, kw_only=True, slots=True, weakref_slot=True)
class SessionConfig:
    """What a host configures on a session. Fields of capabilities that later releases serve (hosted
    tools, MCP, hook registrations) are kept as their JSON form so they round-trip unchanged."""

    system_prompt: str = ""
    model_ref: str = ""
    thinking: ThinkingConfig = field(default_factory=ThinkingConfig)
    max_tokens: int = 0
    auth_profile_id: str = ""
    allowed_tools: tuple[str, ...] = ()
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    labels: Mapping[str, str] = field(default_factory=dict)
    limits: SessionLimits = field(default_factory=SessionLimits)
    auto_compaction: AutoCompaction = field(default_factory=AutoCompaction)
    hosted_tools: tuple[HostedToolDefinition, ...] = ()
    mcp_servers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    disabled_mcp_servers: tuple[str, ...] = ()
    hook_registrations: tuple[Mapping[str, Any], ...] = ()
    # What needs a person's approval before it runs (tool names, `mutating`, `all`); None: the server's default.
    approval_policy: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionOverrides:
    """Settings Resume/Continue/Fork may change; None keeps the stored value."""

    system_prompt: str | None = None
    model_ref: str | None = None
    thinking: ThinkingConfig | None = None
    auth_profile_id: str | None = None
    max_tokens: int | None = None
    approval_policy: tuple[str, ...] | None = None
    api_key: str = ""  # memory only, never persisted

    def apply(self, config: SessionConfig) -> SessionConfig:
        changes: dict[str, Any] = {}
        if self.system_prompt is not None:
            changes["system_prompt"] = self.system_prompt
        if self.model_ref is not None:
            changes["model_ref"] = self.model_ref
        if self.thinking is not None:
            changes["thinking"] = self.thinking
        if self.auth_profile_id is not None:
            changes["auth_profile_id"] = self.auth_profile_id
        if self.max_tokens is not None:
            changes["max_tokens"] = self.max_tokens
        if self.approval_policy is not None:
            changes["approval_policy"] = self.approval_policy
        return replace(config, **changes) if changes else config


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionRecord:
    """A session as stored. `version` is the compare-and-set counter of every state write;
    `sequence_reserved` is the highest event sequence reserved so a crash never reuses one."""

    tenant: str
    identity: SessionIdentity
    config: SessionConfig
    create_time: datetime
    update_time: datetime
    parent_session_id: str = ""
    forked_from: ForkOrigin | None = None
    state: SessionState = SessionState.IDLE
    active_run_id: str = ""
    pending_call_ids: tuple[str, ...] = ()
    stop_requested: bool = False
    usage_snapshot: UsageSnapshot | None = None
    cumulative_usage: Usage = field(default_factory=Usage)
    last_sequence: int = 0
    sequence_reserved: int = 0
    # Steering messages committed to the active run and not yet given to the model (docs/protocol.md, InjectMessage).
    pending_injections: tuple[tuple[ContentPart, ...], ...] = ()
    history_message_count: int = 0
    # When the history was last compacted (the cooldown of MaybeCompactByTokens and automatic compaction).
    last_compaction_time: datetime | None = None
    # Tools a person approved for the rest of the session (APPROVE_ALWAYS); cleared by reset and by a new policy.
    approved_tools: tuple[str, ...] = ()
    version: int = 0

    @property
    def session_id(self) -> str:
        return self.identity.session_id

    @property
    def etag(self) -> str:
        return f'W/"{self.version}"'
