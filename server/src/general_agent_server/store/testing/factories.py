"""Builders of the records the conformance suite writes: plain values, usable by any test that needs a
session, event, transcript entry, history message, run, tool call, idempotency record or checkpoint.

Timestamps carry microseconds on purpose (stores must keep them exactly), and ids are random, so tests
that share one store do not see each other's rows."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from general_agent_server.domain.content import ImagePart, TextPart
from general_agent_server.domain.events import (
    AssistantDelta,
    EventBody,
    HostedToolCall,
    RunFinished,
    RunOutcome,
    RunReason,
    RunStarted,
    RunTrigger,
    SequencedEvent,
    StopReason,
    ToolCall,
    ToolResult,
    UsageSnapshotEvent,
)
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import (
    Approval,
    ApprovalSeverity,
    CallKind,
    CallResult,
    CallStatus,
    IdempotencyRecord,
    ResolvedBy,
    RunRecord,
    RunStatus,
    ToolCallRecord,
)
from general_agent_server.domain.session import (
    AutoCompaction,
    ForkOrigin,
    HostedToolDefinition,
    MemoryConfig,
    SessionConfig,
    SessionIdentity,
    SessionLimits,
    SessionMode,
    SessionRecord,
    SessionState,
    ThinkingConfig,
    ThinkingMode,
    Usage,
    UsageSnapshot,
)
from general_agent_server.domain.transcript import (
    AssistantEntry,
    CompactionEntry,
    MessageEntry,
    SessionResetEntry,
    SystemPromptEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptBody,
    TranscriptEntry,
)
from general_agent_server.workspace.checkpoints.files import CheckpointFile
from general_agent_server.workspace.checkpoints.recorder import Checkpoint

# Timestamps carry microseconds on purpose: stores must keep them exactly.
T0 = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"


def new_tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:12]}"


def new_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def at(seconds: float) -> datetime:
    """T0 plus `seconds` (keeps the microseconds of T0 unless `seconds` changes them)."""
    return T0 + timedelta(seconds=seconds)


def make_session(
    tenant: str,
    session_id: str,
    *,
    session_key: str = "",
    mode: SessionMode = SessionMode.GENERAL,
    labels: dict[str, str] | None = None,
    parent_session_id: str = "",
    update_time: datetime = T0,
    version: int = 1,
) -> SessionRecord:
    """A plain session with the given identity and list-relevant fields."""
    return SessionRecord(
        tenant=tenant,
        identity=SessionIdentity(mode=mode, session_id=session_id, session_key=session_key),
        config=SessionConfig(system_prompt="be brief", model_ref="anthropic/claude-test", labels=labels or {}),
        create_time=T0,
        update_time=update_time,
        parent_session_id=parent_session_id,
        version=version,
    )


def full_session(tenant: str, session_id: str) -> SessionRecord:
    """A session with every field set to a non-default value."""
    return SessionRecord(
        tenant=tenant,
        identity=SessionIdentity(mode=SessionMode.CODING, session_id=session_id, session_key="proj/full-key"),
        config=SessionConfig(
            system_prompt="You are a careful coding agent.\nUnicode: ünïcødé ✓",
            model_ref="anthropic/claude-sonnet-4-6",
            thinking=ThinkingConfig(mode=ThinkingMode.BUDGET, budget_tokens=2048),
            max_tokens=4096,
            auth_profile_id="team-a-profile",
            allowed_tools=("bash", "read_file", "write_file"),
            memory=MemoryConfig(enabled=True, user_id="user-1", agent_id="agent-1"),
            labels={"team": "a", "app.example.com/tier": "gold", "env": "prod"},
            limits=SessionLimits(
                max_model_calls_per_run=7,
                max_tool_calls_per_run=9,
                run_deadline_seconds=120.5,
                hosted_call_timeout_seconds=30.25,
            ),
            auto_compaction=AutoCompaction(threshold_pct=80, cooldown_seconds=12.5),
            hosted_tools=(
                HostedToolDefinition(
                    name="lookup",
                    description="look something up",
                    input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
                    timeout_seconds=42.5,
                ),
            ),
            mcp_servers={"docs": {"command": "mcp-docs", "args": ["--read-only"], "env": {"A": "1"}}},
            disabled_mcp_servers=("docs",),
            hook_registrations=({"event": "pre_tool_use", "url": "http://127.0.0.1:9/hook"},),
            approval_policy=("mutating", "lookup"),
        ),
        create_time=datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        update_time=datetime(2024, 5, 6, 7, 9, 10, 654321, tzinfo=UTC),
        parent_session_id="parent-session-1",
        forked_from=ForkOrigin(session_id="source-session-1", at_sequence=42),
        state=SessionState.SUSPENDED,
        active_run_id="run-7",
        pending_call_ids=("call-1", "call-2"),
        stop_requested=True,
        usage_snapshot=UsageSnapshot(
            used_input_tokens=123456,
            context_window=200000,
            used_pct=61.728,
            capture_time=datetime(2024, 5, 6, 7, 9, 1, 111111, tzinfo=UTC),
        ),
        cumulative_usage=Usage(
            input_tokens=10,
            output_tokens=20,
            cache_read_input_tokens=30,
            cache_creation_input_tokens=40,
            model_calls=5,
        ),
        last_sequence=57,
        sequence_reserved=64,
        history_message_count=12,
        last_compaction_time=datetime(2024, 5, 6, 7, 9, 5, 222222, tzinfo=UTC),
        approved_tools=("write", "docs__search"),
        version=3,
    )


def bump(record: SessionRecord, **changes: object) -> SessionRecord:
    """The next version of a record (what a CAS write stores)."""
    return replace(record, version=record.version + 1, **changes)  # type: ignore[arg-type]


def make_event(session_id: str, sequence: int, body: EventBody | None = None, run_id: str = "run-1") -> SequencedEvent:
    return SequencedEvent(
        sequence=sequence,
        session_id=session_id,
        run_id=run_id,
        create_time=at(sequence),
        body=body if body is not None else AssistantDelta(text=f"delta {sequence}"),
    )


def varied_event_bodies() -> list[EventBody]:
    """One of several kinds, including nested content, bytes, datetimes and enums."""
    return [
        RunStarted(trigger=RunTrigger.TURN, request_id="req-1", model_ref="anthropic/claude-test"),
        AssistantDelta(text="Hello ✓"),
        ToolCall(call_id="call-1", tool_name="bash", input_json='{"cmd": "ls"}'),
        ToolResult(
            call_id="call-1",
            tool_name="bash",
            output=(TextPart(text="a.txt"), ImagePart(mime_type="image/png", data=PNG_BYTES)),
            details_json='{"exit": 0}',
        ),
        HostedToolCall(
            call_id="call-2",
            tool_name="lookup",
            input_json='{"q": "x"}',
            deadline=datetime(2024, 5, 6, 8, 0, 0, 500001, tzinfo=UTC),
        ),
        UsageSnapshotEvent(
            snapshot=UsageSnapshot(used_input_tokens=10, context_window=200000, used_pct=0.005, capture_time=T0)
        ),
        RunFinished(
            outcome=RunOutcome.STOPPED,
            reason=RunReason.STOP_REQUESTED,
            stop_reason=StopReason.STOP_REQUESTED,
            pending_call_ids=("call-2",),
            usage=Usage(input_tokens=1, output_tokens=2, model_calls=1),
        ),
    ]


def make_entry(sequence: int, body: TranscriptBody | None = None, run_id: str = "run-1") -> TranscriptEntry:
    return TranscriptEntry(
        timestamp=at(sequence),
        body=body if body is not None else AssistantEntry(text=f"entry {sequence}"),
        sequence=sequence,
        run_id=run_id,
    )


def varied_transcript_bodies() -> list[TranscriptBody]:
    return [
        SystemPromptEntry(prompt="be brief", model_ref="anthropic/claude-test"),
        MessageEntry(
            content=(TextPart(text="look at this"), ImagePart(mime_type="image/png", data=PNG_BYTES)),
            role="user",
            injected=True,
        ),
        AssistantEntry(text="done", aborted=True),
        ToolCallEntry(call_id="call-1", tool_name="bash", input_json='{"cmd": "ls"}'),
        ToolResultEntry(
            call_id="call-1",
            tool_name="bash",
            output=(TextPart(text="boom"),),
            details_json='{"exit": 1}',
            is_error=True,
        ),
        CompactionEntry(summary="summary", messages_before=10, messages_after=2),
        SessionResetEntry(reason="manual"),
    ]


def make_message(index: int, role: str = "", run_id: str = "run-1") -> HistoryMessage:
    """Alternating user/assistant messages; assistant ones carry a thinking block with its signature."""
    actual_role = role or ("user" if index % 2 == 0 else "assistant")
    if actual_role == "user":
        return HistoryMessage(
            role="user",
            content=({"type": "text", "text": f"message {index}"},),
            run_id=run_id,
        )
    return HistoryMessage(
        role="assistant",
        content=(
            {"type": "thinking", "thinking": f"thought {index}", "signature": f"sig-{index}=="},
            {"type": "text", "text": f"message {index}"},
            {"type": "tool_use", "id": f"toolu_{index}", "name": "bash", "input": {"cmd": "ls", "n": [1, 2]}},
        ),
        run_id=run_id,
        model_ref="anthropic/claude-test",
    )


def make_run(
    tenant: str,
    session_id: str,
    run_id: str,
    *,
    status: RunStatus = RunStatus.RUNNING,
    request_id: str = "",
) -> RunRecord:
    finished = status is RunStatus.FINISHED
    return RunRecord(
        tenant=tenant,
        session_id=session_id,
        run_id=run_id,
        trigger=RunTrigger.ENQUEUED_TURN,
        status=status,
        started_at=at(1),
        first_sequence=3,
        model_ref="anthropic/claude-test",
        request_id=request_id,
        body_hash="hash-" + run_id,
        outcome=RunOutcome.COMPLETED if finished else None,
        reason=RunReason.PROVIDER_ERROR if finished else None,
        last_sequence=9 if finished else 0,
        finished_at=at(2) if finished else None,
        usage=Usage(input_tokens=5, output_tokens=6, cache_read_input_tokens=7, model_calls=2),
    )


def make_idempotency(tenant: str, rpc: str, request_id: str, result: str = "{}") -> IdempotencyRecord:
    return IdempotencyRecord(
        tenant=tenant,
        rpc=rpc,
        request_id=request_id,
        body_hash=f"hash-{rpc}-{request_id}",
        result_json=result,
        create_time=at(3),
    )


def make_checkpoint(name: str, *, content: bytes = b"old", created: float = 1) -> Checkpoint:
    """A checkpoint of two files: one that existed (with `content`, binary-safe) and one that did not."""
    return Checkpoint(
        checkpoint_id=f"cp-{name}-{uuid.uuid4().hex[:8]}",
        run_id=f"run-{name}",
        call_id=f"call-{name}",
        tool_name="write",
        created_at=at(created),
        files=(
            CheckpointFile(path=f"dir/{name}.txt", existed_before=True, prior_content=content),
            CheckpointFile(path=f"new-{name}.txt", existed_before=False),
        ),
    )


def make_tool_call(
    tenant: str,
    session_id: str,
    run_id: str,
    call_id: str,
    *,
    round_index: int = 0,
    position: int = 0,
    kind: CallKind = CallKind.LOCAL,
    resolved: bool = False,
    awaiting_approval: bool = False,
) -> ToolCallRecord:
    """A tool call; hosted ones carry a deadline, resolved ones a result with an image (bytes round-trip)."""
    return ToolCallRecord(
        tenant=tenant,
        session_id=session_id,
        run_id=run_id,
        round_index=round_index,
        position=position,
        call_id=call_id,
        tool_name="lookup" if kind is CallKind.HOSTED else "bash",
        input_json='{"q": "x", "n": 12345678901234567890}',
        kind=kind,
        status=CallStatus.RESOLVED
        if resolved
        else CallStatus.AWAITING_APPROVAL
        if awaiting_approval
        else CallStatus.PENDING,
        deadline=at(60) if kind is CallKind.HOSTED else None,
        result=CallResult(
            content=(TextPart(text="done"), ImagePart(mime_type="image/png", data=PNG_BYTES)),
            details_json='{"exit": 0}',
            is_error=True,
        )
        if resolved
        else None,
        resolved_by=ResolvedBy.SUBMIT if resolved else None,
        payload_hash="hash-" + call_id if resolved else "",
        resolve_sequence=7 if resolved else 0,
        approval=Approval(
            title="Approve bash?",
            description="runs a command",
            severity=ApprovalSeverity.CRITICAL,
            requested_by="plugin-a",
            allow_on_timeout=True,
            deadline=at(90),
        )
        if awaiting_approval
        else None,
    )
