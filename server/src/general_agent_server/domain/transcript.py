"""Transcript entries (transcript.proto): the human-readable record of a session, distinct from the
model history. Stored as rows in the same transaction as their step and exported as JSONL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from general_agent_server.domain.content import ContentPart


@dataclass(frozen=True, kw_only=True, slots=True)
class SystemPromptEntry:
    prompt: str
    model_ref: str
    kind: Literal["system_prompt"] = "system_prompt"


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageEntry:
    content: tuple[ContentPart, ...]
    role: str = "user"
    injected: bool = False
    kind: Literal["message"] = "message"


@dataclass(frozen=True, kw_only=True, slots=True)
class AssistantEntry:
    text: str
    aborted: bool = False
    kind: Literal["assistant"] = "assistant"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallEntry:
    call_id: str
    tool_name: str
    input_json: str
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResultEntry:
    call_id: str
    tool_name: str
    output: tuple[ContentPart, ...]
    details_json: str = ""
    is_error: bool = False
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionEntry:
    summary: str
    messages_before: int
    messages_after: int
    kind: Literal["compaction"] = "compaction"


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionResetEntry:
    reason: str
    kind: Literal["session_reset"] = "session_reset"


TranscriptBody = (
    SystemPromptEntry
    | MessageEntry
    | AssistantEntry
    | ToolCallEntry
    | ToolResultEntry
    | CompactionEntry
    | SessionResetEntry
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscriptEntry:
    """A stored entry; `entry_id` orders entries and pages GetSessionHistory (0 until stored)."""

    timestamp: datetime
    body: TranscriptBody
    sequence: int = 0
    run_id: str = ""
    entry_id: int = 0
