"""The SessionStore conformance suite (spec 8.1).

Every implementation of `general_agent_server.store.port.SessionStore` reuses it by subclassing
`SessionStoreConformance` in a `test_*.py` module and providing an async `store` fixture that yields an
opened store and closes it afterwards:

    class TestSqliteStore(SessionStoreConformance):
        @pytest.fixture
        async def store(self, tmp_path: Path) -> AsyncIterator[SessionStore]:
            ...

Each test works in tenants of its own (random names), so the suite also runs against a store shared
between tests (e.g. one PostgreSQL database) as long as the store starts empty of those tenants.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from general_agent_server.core.checkpoint_files import CheckpointFile
from general_agent_server.core.checkpoints import Checkpoint, CheckpointInfo
from general_agent_server.core.content import ImagePart, TextPart
from general_agent_server.core.events import (
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
from general_agent_server.core.history import HistoryMessage
from general_agent_server.core.runs import IdempotencyRecord, RunRecord, RunStatus
from general_agent_server.core.session import (
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
from general_agent_server.core.transcript import (
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
from general_agent_server.store.port import (
    ListCursor,
    SessionExistsError,
    SessionQuery,
    SessionStore,
    StoreError,
    VersionConflictError,
    WriteBatch,
    session_ids,
)

# Timestamps carry microseconds on purpose: stores must keep them exactly.
T0 = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"


# ---------------------------------------------------------------------- builders


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


def checkpoint_info(checkpoint: Checkpoint, position: int) -> CheckpointInfo:
    """How a stored checkpoint is listed (the position is the store's)."""
    return CheckpointInfo(
        position=position,
        checkpoint_id=checkpoint.checkpoint_id,
        run_id=checkpoint.run_id,
        call_id=checkpoint.call_id,
        tool_name=checkpoint.tool_name,
        created_at=checkpoint.created_at,
        paths=checkpoint.paths,
        stored_bytes=checkpoint.stored_bytes,
    )


UNBOUNDED = {"max_count": 1_000, "max_bytes": 1 << 30}


async def add_checkpoints(
    store: SessionStore, tenant: str, session_id: str, checkpoints: list[Checkpoint], **bounds: int
) -> None:
    for checkpoint in checkpoints:
        await store.add_checkpoint(tenant, session_id, checkpoint, **(UNBOUNDED | bounds))


async def checkpoint_ids(store: SessionStore, tenant: str, session_id: str) -> list[str]:
    return [c.checkpoint_id for c in await store.list_checkpoints(tenant, session_id, limit=1_000)]


def without_entry_ids(entries: list[TranscriptEntry]) -> list[TranscriptEntry]:
    return [replace(e, entry_id=0) for e in entries]


async def create(store: SessionStore, record: SessionRecord) -> SessionRecord:
    await store.create_session(record)
    return record


async def all_events(store: SessionStore, tenant: str, session_id: str) -> list[SequencedEvent]:
    return await store.read_events(tenant, session_id, after_sequence=0, limit=10_000)


async def all_transcript(store: SessionStore, tenant: str, session_id: str) -> list[TranscriptEntry]:
    return await store.read_transcript(tenant, session_id, after_entry_id=0, limit=10_000)


async def list_all(
    store: SessionStore, tenant: str, query: SessionQuery | None = None, limit: int = 1000
) -> list[SessionRecord]:
    return await store.list_sessions(tenant, query or SessionQuery(), after=None, limit=limit)


async def list_ids(store: SessionStore, tenant: str, query: SessionQuery | None = None) -> list[str]:
    return session_ids(await list_all(store, tenant, query))


# ---------------------------------------------------------------------- the suite


class SessionStoreConformance:
    """Tests every SessionStore must pass. Subclasses provide the async fixture `store`."""

    # ------------------------------------------------------------ create / get
    async def test_create_get_round_trips_every_field(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = full_session(tenant, sid)
        await store.create_session(record)

        got = await store.get_session(tenant, sid)

        assert got is not None
        assert got.tenant == tenant
        assert got.identity == SessionIdentity(mode=SessionMode.CODING, session_id=sid, session_key="proj/full-key")
        assert got.session_id == sid
        cfg = got.config
        assert cfg.system_prompt == record.config.system_prompt
        assert cfg.model_ref == "anthropic/claude-sonnet-4-6"
        assert cfg.thinking == ThinkingConfig(mode=ThinkingMode.BUDGET, budget_tokens=2048)
        assert cfg.max_tokens == 4096
        assert cfg.auth_profile_id == "team-a-profile"
        assert tuple(cfg.allowed_tools) == ("bash", "read_file", "write_file")
        assert cfg.memory == MemoryConfig(enabled=True, user_id="user-1", agent_id="agent-1")
        assert dict(cfg.labels) == {"team": "a", "app.example.com/tier": "gold", "env": "prod"}
        assert cfg.limits == SessionLimits(
            max_model_calls_per_run=7,
            max_tool_calls_per_run=9,
            run_deadline_seconds=120.5,
            hosted_call_timeout_seconds=30.25,
        )
        assert cfg.auto_compaction == AutoCompaction(threshold_pct=80, cooldown_seconds=12.5)
        assert cfg.hosted_tools == record.config.hosted_tools
        assert {k: dict(v) for k, v in cfg.mcp_servers.items()} == {
            "docs": {"command": "mcp-docs", "args": ["--read-only"], "env": {"A": "1"}}
        }
        assert tuple(cfg.disabled_mcp_servers) == ("docs",)
        assert [dict(h) for h in cfg.hook_registrations] == [
            {"event": "pre_tool_use", "url": "http://127.0.0.1:9/hook"}
        ]
        assert cfg == record.config
        assert got.create_time == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
        assert got.create_time.microsecond == 123456
        assert got.update_time == datetime(2024, 5, 6, 7, 9, 10, 654321, tzinfo=UTC)
        assert got.update_time.microsecond == 654321
        assert got.create_time.utcoffset() == timedelta(0)
        assert got.parent_session_id == "parent-session-1"
        assert got.forked_from == ForkOrigin(session_id="source-session-1", at_sequence=42)
        assert got.state is SessionState.SUSPENDED
        assert got.active_run_id == "run-7"
        assert tuple(got.pending_call_ids) == ("call-1", "call-2")
        assert got.stop_requested is True
        assert got.usage_snapshot == record.usage_snapshot
        assert got.usage_snapshot is not None
        assert got.usage_snapshot.capture_time == datetime(2024, 5, 6, 7, 9, 1, 111111, tzinfo=UTC)
        assert got.cumulative_usage == Usage(
            input_tokens=10,
            output_tokens=20,
            cache_read_input_tokens=30,
            cache_creation_input_tokens=40,
            model_calls=5,
        )
        assert got.last_sequence == 57
        assert got.sequence_reserved == 64
        assert got.history_message_count == 12
        assert got.version == 3
        assert got == record

    async def test_create_get_round_trips_a_minimal_record(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = SessionRecord(
            tenant=tenant,
            identity=SessionIdentity(session_id=sid),
            config=SessionConfig(),
            create_time=T0,
            update_time=T0,
        )
        await store.create_session(record)
        got = await store.get_session(tenant, sid)
        assert got == record
        assert got is not None
        assert got.forked_from is None
        assert got.usage_snapshot is None
        assert got.cumulative_usage == Usage()
        assert got.version == 0

    async def test_get_unknown_session_returns_none(self, store: SessionStore) -> None:
        assert await store.get_session(new_tenant(), new_id()) is None

    async def test_create_existing_id_raises_session_exists(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        original = await create(store, make_session(tenant, sid, session_key="first"))

        with pytest.raises(SessionExistsError):
            await store.create_session(make_session(tenant, sid, session_key="second", version=9))

        assert await store.get_session(tenant, sid) == original

    async def test_create_with_batch_commits_both(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = make_session(tenant, sid)
        idem = make_idempotency(tenant, "CreateSession", "req-1", result='{"session_id": "x"}')
        entry = make_entry(1, SystemPromptEntry(prompt="be brief", model_ref="m"))
        await store.create_session(
            record, batch=WriteBatch(tenant=tenant, session_id=sid, idempotency=idem, transcript=[entry])
        )

        assert await store.get_session(tenant, sid) == record
        assert await store.get_idempotency(tenant, "CreateSession", "req-1") == idem
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [entry]

    async def test_hook_registrations_put_replace_list_delete(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        await store.put_hook_registration(tenant, "", "wide", '{"v": 1}')
        await store.put_hook_registration(tenant, sid, "mine", '{"v": 1}')
        await store.put_hook_registration(tenant, sid, "mine", '{"v": 2}')  # replaced, not added
        rows = sorted(r for r in await store.list_hook_registrations() if r[0] == tenant)
        assert rows == [(tenant, "", "wide", '{"v": 1}'), (tenant, sid, "mine", '{"v": 2}')]
        assert await store.delete_hook_registration(tenant, "", "wide") is True
        assert await store.delete_hook_registration(tenant, "", "wide") is False
        assert await store.delete_hook_registration(new_tenant(), sid, "mine") is False  # other tenant: untouched
        # Deleting the session removes its registrations.
        await store.delete_session(tenant, sid)
        assert [r for r in await store.list_hook_registrations() if r[0] == tenant] == []

    async def test_create_with_batch_stores_the_sessions_hook_registrations(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        batch = WriteBatch(tenant=tenant, session_id=sid, hook_registrations=[("p1", '{"a": 1}'), ("p2", "{}")])
        await store.create_session(make_session(tenant, sid), batch=batch)
        rows = sorted(r for r in await store.list_hook_registrations() if r[0] == tenant)
        assert rows == [(tenant, sid, "p1", '{"a": 1}'), (tenant, sid, "p2", "{}")]
        with pytest.raises(SessionExistsError):
            await store.create_session(
                make_session(tenant, sid),
                batch=WriteBatch(tenant=tenant, session_id=sid, hook_registrations=[("p3", "{}")]),
            )
        assert sorted(r[2] for r in await store.list_hook_registrations() if r[0] == tenant) == ["p1", "p2"]

    async def test_create_existing_id_with_batch_writes_nothing_of_the_batch(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        idem = make_idempotency(tenant, "CreateSession", "req-dup")

        with pytest.raises(SessionExistsError):
            await store.create_session(
                make_session(tenant, sid),
                batch=WriteBatch(tenant=tenant, session_id=sid, idempotency=idem, transcript=[make_entry(1)]),
            )

        assert await store.get_idempotency(tenant, "CreateSession", "req-dup") is None
        assert await store.count_transcript(tenant, sid) == 0

    # ------------------------------------------------------------ tenant isolation
    async def test_same_id_in_another_tenant_is_independent(self, store: SessionStore) -> None:
        tenant_a, tenant_b, sid = new_tenant(), new_tenant(), new_id()
        rec_a = await create(store, make_session(tenant_a, sid, session_key="key-a", labels={"owner": "a"}))
        rec_b = await create(
            store, make_session(tenant_b, sid, session_key="key-b", mode=SessionMode.CODING, version=5)
        )

        assert await store.get_session(tenant_a, sid) == rec_a
        assert await store.get_session(tenant_b, sid) == rec_b

        # A CAS write in one tenant leaves the other untouched.
        await store.write(
            WriteBatch(
                tenant=tenant_a,
                session_id=sid,
                session=bump(rec_a, state=SessionState.RUNNING),
                events=[make_event(sid, 1)],
                history=[make_message(0)],
                transcript=[make_entry(1)],
            )
        )
        assert await store.get_session(tenant_b, sid) == rec_b
        assert await all_events(store, tenant_b, sid) == []
        assert await store.load_history(tenant_b, sid) == []
        assert await store.count_transcript(tenant_b, sid) == 0
        assert await store.oldest_event_sequence(tenant_b, sid) is None
        assert len(await all_events(store, tenant_a, sid)) == 1

    async def test_get_in_wrong_tenant_returns_none(self, store: SessionStore) -> None:
        tenant, other, sid = new_tenant(), new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.get_session(other, sid) is None

    async def test_list_never_shows_another_tenants_sessions(self, store: SessionStore) -> None:
        tenant_a, tenant_b = new_tenant(), new_tenant()
        ids_a = sorted(new_id("a") for _ in range(3))
        ids_b = sorted(new_id("b") for _ in range(2))
        for sid in ids_a:
            await create(store, make_session(tenant_a, sid))
        for sid in ids_b:
            await create(store, make_session(tenant_b, sid))

        assert await list_ids(store, tenant_a) == ids_a
        assert await list_ids(store, tenant_b) == ids_b
        assert await list_ids(store, tenant_a, SessionQuery(include_children=True)) == ids_a
        assert await list_ids(store, new_tenant()) == []

    async def test_delete_in_wrong_tenant_returns_false_and_deletes_nothing(self, store: SessionStore) -> None:
        tenant, other, sid = new_tenant(), new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid))
        run = make_run(tenant, sid, "run-1")
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                events=[make_event(sid, 1)],
                transcript=[make_entry(1)],
                history=[make_message(0)],
                runs=[run],
            )
        )

        assert await store.delete_session(other, sid) is False

        assert await store.get_session(tenant, sid) == record
        assert len(await all_events(store, tenant, sid)) == 1
        assert await store.count_transcript(tenant, sid) == 1
        assert await store.load_history(tenant, sid) == [make_message(0)]
        assert await store.get_run(tenant, sid, "run-1") == run

    # ------------------------------------------------------------ compare-and-set
    async def test_write_with_next_version_succeeds(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        v2 = bump(
            v1,
            state=SessionState.RUNNING,
            active_run_id="run-1",
            last_sequence=3,
            sequence_reserved=10,
            update_time=at(60),
            cumulative_usage=Usage(input_tokens=3, model_calls=1),
        )
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2))
        got = await store.get_session(tenant, sid)
        assert got == v2
        assert got is not None
        assert got.version == 2

        v3 = bump(v2, state=SessionState.IDLE, active_run_id="")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v3))
        assert await store.get_session(tenant, sid) == v3

    async def test_write_with_stale_version_raises_conflict_and_changes_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2))

        # Another writer that read v1 tries to store its own v2.
        stale = bump(v1, state=SessionState.SUSPENDED, active_run_id="loser")
        with pytest.raises(VersionConflictError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=stale,
                    events=[make_event(sid, 1), make_event(sid, 2)],
                    transcript=[make_entry(1)],
                    history=[make_message(0), make_message(1)],
                    runs=[make_run(tenant, sid, "run-loser", request_id="req-loser")],
                    idempotency=make_idempotency(tenant, "StreamTurn", "req-loser"),
                )
            )

        assert await store.get_session(tenant, sid) == v2
        assert await all_events(store, tenant, sid) == []
        assert await store.oldest_event_sequence(tenant, sid) is None
        assert await store.count_transcript(tenant, sid) == 0
        assert await all_transcript(store, tenant, sid) == []
        assert await store.load_history(tenant, sid) == []
        assert await store.get_run(tenant, sid, "run-loser") is None
        assert await store.find_run_by_request_id(tenant, sid, "req-loser") is None
        assert await store.get_idempotency(tenant, "StreamTurn", "req-loser") is None

    async def test_write_with_stale_version_keeps_existing_history_and_transcript(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1)
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                session=v2,
                history=[make_message(0), make_message(1)],
                transcript=[make_entry(1)],
            )
        )

        with pytest.raises(VersionConflictError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=bump(v1),
                    history=[make_message(9)],
                    replace_history=True,
                    clear_transcript=True,
                )
            )

        assert await store.load_history(tenant, sid) == [make_message(0), make_message(1)]
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [make_entry(1)]
        assert await store.get_session(tenant, sid) == v2

    async def test_write_skipping_a_version_raises_conflict(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        with pytest.raises(VersionConflictError):
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=replace(v1, version=3),
                    events=[make_event(sid, 1)],
                )
            )

        assert await store.get_session(tenant, sid) == v1
        assert await all_events(store, tenant, sid) == []

    async def test_write_session_in_wrong_tenant_raises_and_creates_nothing(self, store: SessionStore) -> None:
        tenant, other, sid = new_tenant(), new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        with pytest.raises(StoreError):
            await store.write(WriteBatch(tenant=other, session_id=sid, session=bump(replace(v1, tenant=other))))

        assert await store.get_session(other, sid) is None
        assert await store.get_session(tenant, sid) == v1

    async def test_write_without_session_record_leaves_version_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]))
        assert await store.get_session(tenant, sid) == v1
        assert [e.sequence for e in await all_events(store, tenant, sid)] == [1]

    async def test_failed_batch_does_not_drop_other_queued_writes(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))

        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 1)]), durable=False)
        with pytest.raises(VersionConflictError):
            await store.write(WriteBatch(tenant=tenant, session_id=sid, session=replace(v1, version=7)))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 2)]), durable=False)
        await store.flush()

        assert [e.sequence for e in await all_events(store, tenant, sid)] == [1, 2]
        assert await store.get_session(tenant, sid) == v1

    # ------------------------------------------------------------ history
    async def test_history_appends_at_base_and_loads_in_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        messages = [make_message(i) for i in range(5)]

        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages[:2], history_base=0))
        assert await store.load_history(tenant, sid) == messages[:2]

        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages[2:4], history_base=2))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=messages[4:], history_base=4))

        loaded = await store.load_history(tenant, sid)
        assert loaded == messages
        assert [m.role for m in loaded] == ["user", "assistant", "user", "assistant", "user"]
        assert loaded[1].content[0] == {"type": "thinking", "thinking": "thought 1", "signature": "sig-1=="}
        assert loaded[1].model_ref == "anthropic/claude-test"
        assert loaded[1].format_version == 1

    async def test_history_is_per_session(self, store: SessionStore) -> None:
        tenant, sid_a, sid_b = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid_a))
        await create(store, make_session(tenant, sid_b))
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, history=[make_message(0, run_id="a")]))
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid_b,
                history=[make_message(0, run_id="b"), make_message(1, run_id="b")],
            )
        )
        assert await store.load_history(tenant, sid_a) == [make_message(0, run_id="a")]
        assert await store.load_history(tenant, sid_b) == [make_message(0, run_id="b"), make_message(1, run_id="b")]

    async def test_replace_history_replaces_the_whole_history(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[make_message(i) for i in range(4)]))

        summary = HistoryMessage(role="user", content=({"type": "text", "text": "summary of 4"},), run_id="c")
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid, history=[summary], history_base=0, replace_history=True)
        )
        assert await store.load_history(tenant, sid) == [summary]

        # Replacing with nothing clears it (ResetSession).
        await store.write(WriteBatch(tenant=tenant, session_id=sid, replace_history=True))
        assert await store.load_history(tenant, sid) == []

    async def test_load_history_of_unknown_session_is_empty(self, store: SessionStore) -> None:
        assert await store.load_history(new_tenant(), new_id()) == []

    async def test_load_history_sized_reports_the_stored_size(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.load_history_sized(tenant, sid) == ([], 0)
        small = make_message(0)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[small]))
        messages, size = await store.load_history_sized(tenant, sid)
        assert messages == [small]
        assert size >= len("message 0")
        big = HistoryMessage(role="assistant", content=({"type": "text", "text": "x" * 100_000},), run_id="run-1")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, history=[big], history_base=1))
        messages, grown = await store.load_history_sized(tenant, sid)
        assert messages == [small, big]
        assert 100_000 < grown - size < 101_000
        assert await store.load_history_sized(new_tenant(), new_id()) == ([], 0)

    # ------------------------------------------------------------ transcript
    async def test_transcript_round_trips_and_assigns_increasing_entry_ids(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        entries = [make_entry(i + 1, body) for i, body in enumerate(varied_transcript_bodies())]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=entries[:3]))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=entries[3:]))

        stored = await all_transcript(store, tenant, sid)

        assert without_entry_ids(stored) == entries
        ids = [e.entry_id for e in stored]
        assert all(i > 0 for i in ids)
        assert ids == sorted(set(ids))
        assert stored[0].timestamp == at(1)
        assert stored[0].timestamp.microsecond == 123456
        body = stored[1].body
        assert isinstance(body, MessageEntry)
        assert body.content[1] == ImagePart(mime_type="image/png", data=PNG_BYTES)

    async def test_read_transcript_pages_by_entry_id_and_limit(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        entries = [make_entry(i) for i in range(1, 8)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=entries))
        everything = await all_transcript(store, tenant, sid)
        assert len(everything) == 7

        pages: list[list[TranscriptEntry]] = []
        after = 0
        while True:
            page = await store.read_transcript(tenant, sid, after_entry_id=after, limit=3)
            if not page:
                break
            pages.append(page)
            after = page[-1].entry_id

        assert [len(p) for p in pages] == [3, 3, 1]
        assert [e for p in pages for e in p] == everything
        assert without_entry_ids([e for p in pages for e in p]) == entries

        # after_entry_id is exclusive.
        third = everything[2].entry_id
        assert await store.read_transcript(tenant, sid, after_entry_id=third, limit=2) == everything[3:5]
        assert await store.read_transcript(tenant, sid, after_entry_id=everything[-1].entry_id, limit=10) == []
        assert await store.read_transcript(tenant, sid, after_entry_id=0, limit=1) == everything[:1]

    async def test_transcript_is_per_session(self, store: SessionStore) -> None:
        tenant, sid_a, sid_b = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid_a))
        await create(store, make_session(tenant, sid_b))
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, transcript=[make_entry(1, run_id="a")]))
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid_b, transcript=[make_entry(1, run_id="b"), make_entry(2)])
        )
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, transcript=[make_entry(2, run_id="a")]))

        assert without_entry_ids(await all_transcript(store, tenant, sid_a)) == [
            make_entry(1, run_id="a"),
            make_entry(2, run_id="a"),
        ]
        assert await store.count_transcript(tenant, sid_a) == 2
        assert await store.count_transcript(tenant, sid_b) == 2

    async def test_count_transcript(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.count_transcript(tenant, sid) == 0
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=[make_entry(1), make_entry(2)]))
        assert await store.count_transcript(tenant, sid) == 2
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=[make_entry(3)]))
        assert await store.count_transcript(tenant, sid) == 3
        assert await store.count_transcript(new_tenant(), sid) == 0

    async def test_clear_transcript(self, store: SessionStore) -> None:
        tenant, sid, other = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, other))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, transcript=[make_entry(1), make_entry(2)]))
        await store.write(WriteBatch(tenant=tenant, session_id=other, transcript=[make_entry(1)]))
        before = await all_transcript(store, tenant, sid)

        await store.write(WriteBatch(tenant=tenant, session_id=sid, clear_transcript=True))

        assert await store.count_transcript(tenant, sid) == 0
        assert await all_transcript(store, tenant, sid) == []
        assert await store.count_transcript(tenant, other) == 1

        # Entries written with the clear land after it; entry ids are never reused, so an old page
        # position cannot skip or repeat new entries.
        fresh = make_entry(3, SessionResetEntry(reason="manual"))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, clear_transcript=True, transcript=[fresh]))
        after = await all_transcript(store, tenant, sid)
        assert without_entry_ids(after) == [fresh]
        assert after[0].entry_id > max(e.entry_id for e in before)

    # ------------------------------------------------------------ events
    async def test_events_round_trip_in_sequence_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, i + 1, body) for i, body in enumerate(varied_event_bodies())]
        # Written out of order and across batches: reads order by sequence.
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[events[3], events[0], events[2]]))
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[events[1], *events[4:]]))

        stored = await all_events(store, tenant, sid)

        assert stored == events
        assert [e.sequence for e in stored] == list(range(1, len(events) + 1))
        assert stored[0].create_time == at(1)
        assert stored[0].create_time.microsecond == 123456

    async def test_read_events_after_sequence_and_limit(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, i) for i in range(1, 11)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))

        assert await store.read_events(tenant, sid, after_sequence=0, limit=3) == events[:3]
        assert await store.read_events(tenant, sid, after_sequence=3, limit=3) == events[3:6]
        assert await store.read_events(tenant, sid, after_sequence=8, limit=5) == events[8:]
        assert await store.read_events(tenant, sid, after_sequence=10, limit=5) == []
        assert await store.read_events(tenant, sid, after_sequence=0, limit=100) == events

    async def test_read_events_with_gaps(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, s) for s in (5, 6, 9, 20)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))

        assert await store.read_events(tenant, sid, after_sequence=0, limit=2) == events[:2]
        assert await store.read_events(tenant, sid, after_sequence=6, limit=10) == events[2:]
        assert await store.read_events(tenant, sid, after_sequence=7, limit=1) == [events[2]]

    async def test_events_are_per_session_and_tenant(self, store: SessionStore) -> None:
        tenant, other_tenant, sid_a, sid_b = new_tenant(), new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid_a))
        await create(store, make_session(tenant, sid_b))
        await store.write(WriteBatch(tenant=tenant, session_id=sid_a, events=[make_event(sid_a, 1)]))
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid_b, events=[make_event(sid_b, 1), make_event(sid_b, 2)])
        )

        assert await all_events(store, tenant, sid_a) == [make_event(sid_a, 1)]
        assert await all_events(store, tenant, sid_b) == [make_event(sid_b, 1), make_event(sid_b, 2)]
        assert await all_events(store, other_tenant, sid_a) == []

    async def test_oldest_event_sequence(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.oldest_event_sequence(tenant, sid) is None

        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 12), make_event(sid, 13)]))
        assert await store.oldest_event_sequence(tenant, sid) == 12
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=[make_event(sid, 14)]))
        assert await store.oldest_event_sequence(tenant, sid) == 12
        assert await store.oldest_event_sequence(new_tenant(), sid) is None
        assert await store.oldest_event_sequence(tenant, new_id()) is None

    # ------------------------------------------------------------ buffered writes / group commit
    async def test_buffered_write_is_visible_after_flush(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        v2 = bump(v1, last_sequence=1)

        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                session=v2,
                events=[make_event(sid, 1)],
                transcript=[make_entry(1)],
                history=[make_message(0)],
            ),
            durable=False,
        )
        await store.flush()

        assert await store.get_session(tenant, sid) == v2
        assert await all_events(store, tenant, sid) == [make_event(sid, 1)]
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [make_entry(1)]
        assert await store.load_history(tenant, sid) == [make_message(0)]

    async def test_flush_with_nothing_queued_returns(self, store: SessionStore) -> None:
        await asyncio.wait_for(store.flush(), timeout=10)
        await asyncio.wait_for(store.flush(), timeout=10)

    async def test_many_buffered_writes_then_a_durable_one_commit_in_order(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        record = await create(store, make_session(tenant, sid, version=1))
        count = 60

        # Each buffered batch is a CAS on the previous one's version: any reordering would conflict.
        for i in range(1, count + 1):
            record = bump(record, last_sequence=i)
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=sid,
                    session=record,
                    events=[make_event(sid, i)],
                    transcript=[make_entry(i)],
                    history=[make_message(i - 1)],
                    history_base=i - 1,
                ),
                durable=False,
            )
        final = bump(record, last_sequence=count + 1, state=SessionState.IDLE)
        await store.write(
            WriteBatch(tenant=tenant, session_id=sid, session=final, events=[make_event(sid, count + 1)]),
            durable=True,
        )

        # No flush: returning from the durable write means everything queued before it is committed.
        assert await store.get_session(tenant, sid) == final
        assert await all_events(store, tenant, sid) == [make_event(sid, i) for i in range(1, count + 2)]
        assert without_entry_ids(await all_transcript(store, tenant, sid)) == [
            make_entry(i) for i in range(1, count + 1)
        ]
        assert await store.load_history(tenant, sid) == [make_message(i) for i in range(count)]

    async def test_concurrent_durable_writers_to_different_sessions(self, store: SessionStore) -> None:
        tenant = new_tenant()
        sids = [new_id() for _ in range(8)]
        for sid in sids:
            await create(store, make_session(tenant, sid, version=1))

        async def writer(sid: str) -> None:
            record = await store.get_session(tenant, sid)
            assert record is not None
            for i in range(1, 6):
                record = bump(record, last_sequence=i)
                await store.write(
                    WriteBatch(tenant=tenant, session_id=sid, session=record, events=[make_event(sid, i)])
                )

        await asyncio.gather(*(writer(sid) for sid in sids))

        for sid in sids:
            got = await store.get_session(tenant, sid)
            assert got is not None
            assert got.version == 6
            assert got.last_sequence == 5
            assert [e.sequence for e in await all_events(store, tenant, sid)] == [1, 2, 3, 4, 5]

    # ------------------------------------------------------------ list_sessions
    async def test_list_orders_by_update_time_desc_then_session_id(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-b", update_time=at(10)))
        await create(store, make_session(tenant, "s-old", update_time=at(1)))
        await create(store, make_session(tenant, "s-a", update_time=at(10)))
        await create(store, make_session(tenant, "s-new", update_time=at(20)))
        await create(store, make_session(tenant, "s-c", update_time=at(10)))

        assert await list_ids(store, tenant) == ["s-new", "s-a", "s-b", "s-c", "s-old"]

    async def test_list_order_distinguishes_microseconds(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", update_time=T0))
        await create(store, make_session(tenant, "s-2", update_time=T0 + timedelta(microseconds=1)))
        assert await list_ids(store, tenant) == ["s-2", "s-1"]

    async def test_list_order_follows_updates(self, store: SessionStore) -> None:
        tenant = new_tenant()
        first = await create(store, make_session(tenant, "s-1", update_time=at(1)))
        await create(store, make_session(tenant, "s-2", update_time=at(2)))
        assert await list_ids(store, tenant) == ["s-2", "s-1"]

        await store.write(WriteBatch(tenant=tenant, session_id="s-1", session=bump(first, update_time=at(3))))
        assert await list_ids(store, tenant) == ["s-1", "s-2"]

    async def test_list_respects_limit(self, store: SessionStore) -> None:
        tenant = new_tenant()
        for i in range(5):
            await create(store, make_session(tenant, f"s-{i}", update_time=at(i)))
        page = await store.list_sessions(tenant, SessionQuery(), after=None, limit=2)
        assert session_ids(page) == ["s-4", "s-3"]

    async def test_list_cursor_pages_yield_each_session_exactly_once(self, store: SessionStore) -> None:
        tenant = new_tenant()
        # Ties on update_time straddle page boundaries.
        times = [5, 5, 5, 4, 4, 3, 2, 2, 2, 2, 1]
        expected: list[tuple[datetime, str]] = []
        for i, t in enumerate(times):
            sid = f"s-{(i * 7) % 11:02d}"
            await create(store, make_session(tenant, sid, update_time=at(t)))
            expected.append((at(t), sid))
        expected.sort(key=lambda pair: (-pair[0].timestamp(), pair[1]))
        expected_ids = [sid for _, sid in expected]
        assert await list_ids(store, tenant) == expected_ids

        for page_size in (1, 2, 3, 4, 11, 20):
            seen: list[str] = []
            cursor: ListCursor | None = None
            pages = 0
            while True:
                page = await store.list_sessions(tenant, SessionQuery(), after=cursor, limit=page_size)
                if not page:
                    break
                pages += 1
                assert len(page) <= page_size
                seen.extend(session_ids(page))
                last = page[-1]
                cursor = ListCursor(update_time=last.update_time, session_id=last.session_id)
                assert pages <= len(times) + 1, "paging does not terminate"
            assert seen == expected_ids, f"page_size={page_size}"
            assert len(set(seen)) == len(times)

    async def test_list_cursor_is_strictly_after(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-a", update_time=at(5)))
        await create(store, make_session(tenant, "s-b", update_time=at(5)))
        await create(store, make_session(tenant, "s-c", update_time=at(4)))

        after_a = ListCursor(update_time=at(5), session_id="s-a")
        page = await store.list_sessions(tenant, SessionQuery(), after=after_a, limit=10)
        assert session_ids(page) == ["s-b", "s-c"]
        after_b = ListCursor(update_time=at(5), session_id="s-b")
        page = await store.list_sessions(tenant, SessionQuery(), after=after_b, limit=10)
        assert session_ids(page) == ["s-c"]
        after_c = ListCursor(update_time=at(4), session_id="s-c")
        assert await store.list_sessions(tenant, SessionQuery(), after=after_c, limit=10) == []

    async def test_list_filters_by_session_key_prefix(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", session_key="proj/alpha", update_time=at(4)))
        await create(store, make_session(tenant, "s-2", session_key="proj/beta", update_time=at(3)))
        await create(store, make_session(tenant, "s-3", session_key="other/proj/x", update_time=at(2)))
        await create(store, make_session(tenant, "s-4", session_key="proj", update_time=at(1)))
        await create(store, make_session(tenant, "s-5", session_key="", update_time=at(0)))

        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="proj/")) == ["s-1", "s-2"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="proj")) == ["s-1", "s-2", "s-4"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="proj/alpha")) == ["s-1"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="Proj")) == []
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="nope")) == []
        assert await list_ids(store, tenant, SessionQuery()) == ["s-1", "s-2", "s-3", "s-4", "s-5"]

    async def test_list_key_prefix_is_literal_not_a_pattern(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", session_key="50%_off", update_time=at(3)))
        await create(store, make_session(tenant, "s-2", session_key="50xyoff", update_time=at(2)))
        await create(store, make_session(tenant, "s-3", session_key="a_b", update_time=at(1)))
        await create(store, make_session(tenant, "s-4", session_key="axb", update_time=at(0)))

        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="50%")) == ["s-1"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="a_")) == ["s-3"]
        assert await list_ids(store, tenant, SessionQuery(session_key_prefix="%")) == []

    async def test_list_filters_by_mode(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", mode=SessionMode.CODING, update_time=at(3)))
        await create(store, make_session(tenant, "s-2", mode=SessionMode.GENERAL, update_time=at(2)))
        await create(store, make_session(tenant, "s-3", mode=SessionMode.CODING, update_time=at(1)))

        assert await list_ids(store, tenant, SessionQuery(mode=SessionMode.CODING)) == ["s-1", "s-3"]
        assert await list_ids(store, tenant, SessionQuery(mode=SessionMode.GENERAL)) == ["s-2"]
        assert await list_ids(store, tenant, SessionQuery(mode=None)) == ["s-1", "s-2", "s-3"]

    async def test_list_filters_by_labels_all_must_match(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "s-1", labels={"team": "a", "env": "prod"}, update_time=at(4)))
        await create(store, make_session(tenant, "s-2", labels={"team": "a", "env": "dev"}, update_time=at(3)))
        await create(store, make_session(tenant, "s-3", labels={"team": "b", "env": "prod"}, update_time=at(2)))
        await create(store, make_session(tenant, "s-4", labels={}, update_time=at(1)))
        await create(store, make_session(tenant, "s-5", labels={"app.example.com/tier": "gold"}, update_time=at(0)))

        def query(labels: dict[str, str]) -> SessionQuery:
            return SessionQuery(labels=labels)

        assert await list_ids(store, tenant, query({"team": "a"})) == ["s-1", "s-2"]
        assert await list_ids(store, tenant, query({"team": "a", "env": "prod"})) == ["s-1"]
        assert await list_ids(store, tenant, query({"env": "prod"})) == ["s-1", "s-3"]
        assert await list_ids(store, tenant, query({"team": "a", "env": "staging"})) == []
        assert await list_ids(store, tenant, query({"team": "c"})) == []
        assert await list_ids(store, tenant, query({"missing": ""})) == []
        assert await list_ids(store, tenant, query({"app.example.com/tier": "gold"})) == ["s-5"]
        assert await list_ids(store, tenant, query({})) == ["s-1", "s-2", "s-3", "s-4", "s-5"]

    async def test_list_label_filter_follows_updates(self, store: SessionStore) -> None:
        tenant = new_tenant()
        record = await create(store, make_session(tenant, "s-1", labels={"stage": "draft"}))
        new_config = replace(record.config, labels={"stage": "final"})
        await store.write(WriteBatch(tenant=tenant, session_id="s-1", session=bump(record, config=new_config)))

        assert await list_ids(store, tenant, SessionQuery(labels={"stage": "final"})) == ["s-1"]
        assert await list_ids(store, tenant, SessionQuery(labels={"stage": "draft"})) == []

    async def test_list_filters_by_parent_session_id(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "p-1", update_time=at(9)))
        await create(store, make_session(tenant, "p-2", update_time=at(8)))
        await create(store, make_session(tenant, "c-1", parent_session_id="p-1", update_time=at(3)))
        await create(store, make_session(tenant, "c-2", parent_session_id="p-1", update_time=at(4)))
        await create(store, make_session(tenant, "c-3", parent_session_id="p-2", update_time=at(5)))

        assert await list_ids(store, tenant, SessionQuery(parent_session_id="p-1")) == ["c-2", "c-1"]
        assert await list_ids(store, tenant, SessionQuery(parent_session_id="p-2")) == ["c-3"]
        assert await list_ids(store, tenant, SessionQuery(parent_session_id="c-1")) == []

    async def test_list_hides_children_unless_include_children(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(store, make_session(tenant, "p-1", update_time=at(9)))
        await create(store, make_session(tenant, "c-1", parent_session_id="p-1", update_time=at(10)))
        await create(store, make_session(tenant, "p-2", update_time=at(1)))

        assert await list_ids(store, tenant) == ["p-1", "p-2"]
        assert await list_ids(store, tenant, SessionQuery(include_children=False)) == ["p-1", "p-2"]
        assert await list_ids(store, tenant, SessionQuery(include_children=True)) == ["c-1", "p-1", "p-2"]

    async def test_list_combines_filters(self, store: SessionStore) -> None:
        tenant = new_tenant()
        await create(
            store,
            make_session(
                tenant, "s-1", session_key="k/1", mode=SessionMode.CODING, labels={"t": "a"}, update_time=at(4)
            ),
        )
        await create(
            store,
            make_session(
                tenant, "s-2", session_key="k/2", mode=SessionMode.GENERAL, labels={"t": "a"}, update_time=at(3)
            ),
        )
        await create(
            store,
            make_session(
                tenant, "s-3", session_key="x/3", mode=SessionMode.CODING, labels={"t": "a"}, update_time=at(2)
            ),
        )
        await create(
            store,
            make_session(
                tenant, "s-4", session_key="k/4", mode=SessionMode.CODING, labels={"t": "b"}, update_time=at(1)
            ),
        )
        query = SessionQuery(session_key_prefix="k/", mode=SessionMode.CODING, labels={"t": "a"})
        assert await list_ids(store, tenant, query) == ["s-1"]

    # ------------------------------------------------------------ delete
    async def test_delete_removes_session_and_everything_it_owns(self, store: SessionStore) -> None:
        tenant, sid, keep = new_tenant(), new_id(), new_id()
        for s in (sid, keep):
            await create(store, make_session(tenant, s))
            await store.write(
                WriteBatch(
                    tenant=tenant,
                    session_id=s,
                    events=[make_event(s, 1), make_event(s, 2)],
                    transcript=[make_entry(1)],
                    history=[make_message(0), make_message(1)],
                    runs=[
                        make_run(tenant, s, "run-1", request_id="req-1"),
                        make_run(tenant, s, "run-2", status=RunStatus.SUSPENDED),
                    ],
                )
            )

        assert await store.delete_session(tenant, sid) is True

        assert await store.get_session(tenant, sid) is None
        assert await store.load_history(tenant, sid) == []
        assert await all_transcript(store, tenant, sid) == []
        assert await store.count_transcript(tenant, sid) == 0
        assert await all_events(store, tenant, sid) == []
        assert await store.oldest_event_sequence(tenant, sid) is None
        assert await store.get_run(tenant, sid, "run-1") is None
        assert await store.get_run(tenant, sid, "run-2") is None
        assert await store.find_run_by_request_id(tenant, sid, "req-1") is None
        unfinished = {(r.tenant, r.session_id, r.run_id) for r in await store.list_unfinished_runs()}
        assert (tenant, sid, "run-1") not in unfinished
        assert (tenant, sid, "run-2") not in unfinished
        assert sid not in await list_ids(store, tenant, SessionQuery(include_children=True))

        # The other session is intact.
        assert await store.get_session(tenant, keep) is not None
        assert len(await all_events(store, tenant, keep)) == 2
        assert await store.count_transcript(tenant, keep) == 1
        assert len(await store.load_history(tenant, keep)) == 2
        assert await store.get_run(tenant, keep, "run-1") is not None
        assert (tenant, keep, "run-2") in unfinished

    async def test_delete_returns_true_then_false(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.delete_session(tenant, sid) is True
        assert await store.delete_session(tenant, sid) is False
        assert await store.delete_session(tenant, new_id()) is False

    async def test_recreated_session_starts_empty(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        await store.write(
            WriteBatch(
                tenant=tenant,
                session_id=sid,
                events=[make_event(sid, 1)],
                transcript=[make_entry(1)],
                history=[make_message(0)],
            )
        )
        await store.delete_session(tenant, sid)

        fresh = await create(store, make_session(tenant, sid, session_key="again"))
        assert await store.get_session(tenant, sid) == fresh
        assert await all_events(store, tenant, sid) == []
        assert await store.count_transcript(tenant, sid) == 0
        assert await store.load_history(tenant, sid) == []

    # ------------------------------------------------------------ runs
    async def test_run_round_trip(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        running = make_run(tenant, sid, "run-1", request_id="req-1")
        finished = make_run(tenant, sid, "run-2", status=RunStatus.FINISHED, request_id="req-2")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[running, finished]))

        assert await store.get_run(tenant, sid, "run-1") == running
        got = await store.get_run(tenant, sid, "run-2")
        assert got == finished
        assert got is not None
        assert got.outcome is RunOutcome.COMPLETED
        assert got.reason is RunReason.PROVIDER_ERROR
        assert got.finished_at == at(2)
        assert got.started_at == at(1)
        assert got.trigger is RunTrigger.ENQUEUED_TURN
        assert got.usage == Usage(input_tokens=5, output_tokens=6, cache_read_input_tokens=7, model_calls=2)

        assert await store.get_run(tenant, sid, "run-unknown") is None
        assert await store.get_run(new_tenant(), sid, "run-1") is None
        assert await store.get_run(tenant, new_id(), "run-1") is None

    async def test_writing_a_run_again_updates_it(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        run = make_run(tenant, sid, "run-1", request_id="req-1")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[run]))

        done = replace(
            run,
            status=RunStatus.FINISHED,
            outcome=RunOutcome.FAILED,
            reason=RunReason.INTERRUPTED,
            last_sequence=17,
            finished_at=at(30),
        )
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[done]))

        assert await store.get_run(tenant, sid, "run-1") == done
        assert await store.find_run_by_request_id(tenant, sid, "req-1") == done
        unfinished = [r for r in await store.list_unfinished_runs() if r.tenant == tenant]
        assert unfinished == []

    async def test_find_run_by_request_id(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        run_a = make_run(tenant, sid, "run-a", request_id="req-a")
        run_b = make_run(tenant, sid, "run-b", status=RunStatus.FINISHED, request_id="req-b")
        await store.write(WriteBatch(tenant=tenant, session_id=sid, runs=[run_a, run_b]))

        assert await store.find_run_by_request_id(tenant, sid, "req-a") == run_a
        assert await store.find_run_by_request_id(tenant, sid, "req-b") == run_b
        assert await store.find_run_by_request_id(tenant, sid, "req-unknown") is None
        assert await store.find_run_by_request_id(new_tenant(), sid, "req-a") is None
        assert await store.find_run_by_request_id(tenant, new_id(), "req-a") is None

    async def test_list_unfinished_runs_spans_tenants_and_skips_finished(self, store: SessionStore) -> None:
        tenant_a, tenant_b, sid = new_tenant(), new_tenant(), new_id()
        await create(store, make_session(tenant_a, sid))
        await create(store, make_session(tenant_b, sid))
        a_running = make_run(tenant_a, sid, "run-1", status=RunStatus.RUNNING)
        a_finished = make_run(tenant_a, sid, "run-2", status=RunStatus.FINISHED)
        b_suspended = make_run(tenant_b, sid, "run-1", status=RunStatus.SUSPENDED)
        b_finished = make_run(tenant_b, sid, "run-3", status=RunStatus.FINISHED)
        await store.write(WriteBatch(tenant=tenant_a, session_id=sid, runs=[a_running, a_finished]))
        await store.write(WriteBatch(tenant=tenant_b, session_id=sid, runs=[b_suspended, b_finished]))

        ours = [r for r in await store.list_unfinished_runs() if r.tenant in (tenant_a, tenant_b)]

        key = lambda r: (r.tenant, r.session_id, r.run_id)  # noqa: E731
        assert sorted(ours, key=key) == sorted([a_running, b_suspended], key=key)
        assert {r.status for r in ours} == {RunStatus.RUNNING, RunStatus.SUSPENDED}

    # ------------------------------------------------------------ idempotency
    async def test_idempotency_round_trip(self, store: SessionStore) -> None:
        tenant = new_tenant()
        record = make_idempotency(tenant, "CreateSession", "req-1", result='{"session_id": "abc", "n": [1, 2]}')
        assert await store.get_idempotency(tenant, "CreateSession", "req-1") is None

        await store.put_idempotency(record)

        got = await store.get_idempotency(tenant, "CreateSession", "req-1")
        assert got == record
        assert got is not None
        assert got.body_hash == "hash-CreateSession-req-1"
        assert got.result_json == '{"session_id": "abc", "n": [1, 2]}'
        assert got.create_time == at(3)

    async def test_idempotency_is_scoped_by_tenant_and_rpc(self, store: SessionStore) -> None:
        tenant_a, tenant_b = new_tenant(), new_tenant()
        a_create = make_idempotency(tenant_a, "CreateSession", "req-1", result='"a-create"')
        a_delete = make_idempotency(tenant_a, "DeleteSession", "req-1", result='"a-delete"')
        b_create = make_idempotency(tenant_b, "CreateSession", "req-1", result='"b-create"')
        await store.put_idempotency(a_create)
        await store.put_idempotency(a_delete)
        await store.put_idempotency(b_create)

        assert await store.get_idempotency(tenant_a, "CreateSession", "req-1") == a_create
        assert await store.get_idempotency(tenant_a, "DeleteSession", "req-1") == a_delete
        assert await store.get_idempotency(tenant_b, "CreateSession", "req-1") == b_create
        assert await store.get_idempotency(tenant_b, "DeleteSession", "req-1") is None
        assert await store.get_idempotency(tenant_a, "ForkSession", "req-1") is None
        assert await store.get_idempotency(tenant_a, "CreateSession", "req-2") is None

    async def test_idempotency_written_in_a_batch(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        record = make_idempotency(tenant, "ResumeSession", "req-9", result='{"ok": true}')
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=bump(v1), idempotency=record))
        assert await store.get_idempotency(tenant, "ResumeSession", "req-9") == record

    # ------------------------------------------------------------ leases
    async def test_lease_is_exclusive_while_unexpired(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False

    async def test_lease_owner_renews(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=0.01) is True
        # Renewing extends the expiry: after the first TTL has passed the lease still holds.
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        await asyncio.sleep(0.05)
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

    async def test_expired_lease_can_be_taken_over(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=0.01) is True
        await asyncio.sleep(0.05)  # let the TTL pass
        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        # B holds it now; A lost it.
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is False

    async def test_release_by_non_owner_does_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

        assert await store.release_lease(tenant, sid, "owner-b") is None  # type: ignore[func-returns-value]

        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is False
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

    async def test_release_by_owner_frees_the_lease(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True

        await store.release_lease(tenant, sid, "owner-a")

        assert await store.acquire_lease(tenant, sid, "owner-b", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is False

    async def test_lease_is_scoped_by_tenant_and_session(self, store: SessionStore) -> None:
        tenant_a, tenant_b, sid, sid2 = new_tenant(), new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant_a, sid))
        await create(store, make_session(tenant_a, sid2))
        await create(store, make_session(tenant_b, sid))
        assert await store.acquire_lease(tenant_a, sid, "owner-a", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant_b, sid, "owner-b", ttl_seconds=60) is True
        assert await store.acquire_lease(tenant_a, sid2, "owner-b", ttl_seconds=60) is True
        # Releasing in one tenant does not free the other.
        await store.release_lease(tenant_b, sid, "owner-b")
        assert await store.acquire_lease(tenant_a, sid, "owner-b", ttl_seconds=60) is False

    async def test_lease_operations_leave_the_session_record_alone(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        v1 = await create(store, make_session(tenant, sid, version=1))
        assert await store.acquire_lease(tenant, sid, "owner-a", ttl_seconds=60) is True
        assert await store.get_session(tenant, sid) == v1

        # A CAS write by the lease holder is unaffected by the lease (version 1 -> 2).
        v2 = bump(v1, state=SessionState.RUNNING)
        await store.write(WriteBatch(tenant=tenant, session_id=sid, session=v2))
        assert await store.get_session(tenant, sid) == v2
        await store.release_lease(tenant, sid, "owner-a")
        assert await store.get_session(tenant, sid) == v2

    # ------------------------------------------------------------ notify
    async def test_notify_is_callable_and_returns_none(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        result = await store.notify(tenant, sid, 5)  # type: ignore[func-returns-value]
        assert result is None
        # It changes no state.
        assert await store.get_session(tenant, sid) == make_session(tenant, sid)
        assert await all_events(store, tenant, sid) == []

    async def test_purge_events_keeps_the_newest_by_count(self, store: SessionStore) -> None:
        tenant, sid, other = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, other))
        events = [make_event(sid, i) for i in range(1, 11)]
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))
        await store.write(WriteBatch(tenant=tenant, session_id=other, events=[make_event(other, 1)]))
        await store.purge_events(tenant, sid, keep_last=3, older_than=at(-1000))
        assert await all_events(store, tenant, sid) == events[7:]
        assert await store.oldest_event_sequence(tenant, sid) == 8
        assert len(await all_events(store, tenant, other)) == 1  # other sessions untouched

    async def test_purge_events_by_age_always_keeps_the_newest(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        events = [make_event(sid, i) for i in range(1, 6)]  # created at T0+1s … T0+5s
        await store.write(WriteBatch(tenant=tenant, session_id=sid, events=events))
        await store.purge_events(tenant, sid, keep_last=100, older_than=at(3.5))
        assert await all_events(store, tenant, sid) == events[3:]
        await store.purge_events(tenant, sid, keep_last=100, older_than=at(1000))
        assert await all_events(store, tenant, sid) == events[4:]

    # ------------------------------------------------------------ checkpoints
    async def test_checkpoints_round_trip_and_list_newest_first(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        first, second = make_checkpoint("a", content=PNG_BYTES), make_checkpoint("b", content=b"", created=2)
        await add_checkpoints(store, tenant, sid, [first, second])

        listed = await store.list_checkpoints(tenant, sid, limit=10)
        assert [c.checkpoint_id for c in listed] == [second.checkpoint_id, first.checkpoint_id]
        assert listed[0].position > listed[1].position
        assert listed == [checkpoint_info(second, listed[0].position), checkpoint_info(first, listed[1].position)]
        assert listed[1].stored_bytes == len(PNG_BYTES)
        # Loading down to the oldest returns both with their contents, newest first.
        assert await store.load_checkpoints_down_to(tenant, sid, first.checkpoint_id) == [second, first]

    async def test_list_checkpoints_pages_before_a_position(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), created=i) for i in range(5)]
        await add_checkpoints(store, tenant, sid, checkpoints)
        newest_ids = [c.checkpoint_id for c in reversed(checkpoints)]

        page = await store.list_checkpoints(tenant, sid, limit=2)
        assert [c.checkpoint_id for c in page] == newest_ids[:2]
        rest = await store.list_checkpoints(tenant, sid, before_position=page[-1].position, limit=10)
        assert [c.checkpoint_id for c in rest] == newest_ids[2:]

    async def test_checkpoint_bound_by_count_drops_the_oldest(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), created=i) for i in range(5)]
        dropped: list[str] = []
        for checkpoint in checkpoints:
            dropped += await store.add_checkpoint(tenant, sid, checkpoint, max_count=3, max_bytes=1 << 30)

        assert dropped == [checkpoints[0].checkpoint_id, checkpoints[1].checkpoint_id]
        assert await checkpoint_ids(store, tenant, sid) == [c.checkpoint_id for c in reversed(checkpoints[2:])]
        assert await store.load_checkpoints_down_to(tenant, sid, checkpoints[1].checkpoint_id) == []

    async def test_checkpoint_bound_by_bytes_drops_the_oldest(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), content=b"x" * 10, created=i) for i in range(3)]
        await add_checkpoints(store, tenant, sid, checkpoints[:2], max_bytes=25)
        dropped = await store.add_checkpoint(tenant, sid, checkpoints[2], max_count=100, max_bytes=25)

        assert dropped == [checkpoints[0].checkpoint_id]
        assert await checkpoint_ids(store, tenant, sid) == [checkpoints[2].checkpoint_id, checkpoints[1].checkpoint_id]

    async def test_a_checkpoint_larger_than_the_byte_bound_drops_everything(self, store: SessionStore) -> None:
        """The chain must stay contiguous from the newest end, so a too-large newest one goes too."""
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        small, huge = make_checkpoint("small", content=b"x"), make_checkpoint("huge", content=b"y" * 100, created=2)
        await add_checkpoints(store, tenant, sid, [small], max_bytes=50)
        dropped = await store.add_checkpoint(tenant, sid, huge, max_count=100, max_bytes=50)

        assert dropped == [small.checkpoint_id, huge.checkpoint_id]
        assert await checkpoint_ids(store, tenant, sid) == []

    async def test_load_down_to_and_delete_checkpoints(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        await create(store, make_session(tenant, sid))
        checkpoints = [make_checkpoint(str(i), created=i) for i in range(4)]
        await add_checkpoints(store, tenant, sid, checkpoints)

        down_to = await store.load_checkpoints_down_to(tenant, sid, checkpoints[1].checkpoint_id)
        assert down_to == [checkpoints[3], checkpoints[2], checkpoints[1]]
        assert await store.load_checkpoints_down_to(tenant, sid, "no-such-checkpoint") == []

        await store.delete_checkpoints(tenant, sid, [c.checkpoint_id for c in down_to])
        assert await checkpoint_ids(store, tenant, sid) == [checkpoints[0].checkpoint_id]
        assert await store.load_checkpoints_down_to(tenant, sid, checkpoints[0].checkpoint_id) == [checkpoints[0]]

    async def test_checkpoints_are_scoped_by_tenant_and_session(self, store: SessionStore) -> None:
        tenant, other_tenant, sid, other_sid = new_tenant(), new_tenant(), new_id(), new_id()
        for t, s in ((tenant, sid), (other_tenant, sid), (tenant, other_sid)):
            await create(store, make_session(t, s))
        mine = make_checkpoint("mine")
        await add_checkpoints(store, tenant, sid, [mine])

        assert await checkpoint_ids(store, other_tenant, sid) == []
        assert await checkpoint_ids(store, tenant, other_sid) == []
        assert await store.load_checkpoints_down_to(other_tenant, sid, mine.checkpoint_id) == []
        assert await store.load_checkpoints_down_to(tenant, other_sid, mine.checkpoint_id) == []
        await store.delete_checkpoints(other_tenant, sid, [mine.checkpoint_id])
        await store.delete_checkpoints(tenant, other_sid, [mine.checkpoint_id])
        assert await checkpoint_ids(store, tenant, sid) == [mine.checkpoint_id]
        # Bounds count per session: a full session elsewhere drops nothing here.
        await add_checkpoints(store, other_tenant, sid, [make_checkpoint("x"), make_checkpoint("y")], max_count=1)
        assert await checkpoint_ids(store, tenant, sid) == [mine.checkpoint_id]

    async def test_add_checkpoint_to_an_unknown_session_stores_nothing(self, store: SessionStore) -> None:
        tenant, sid = new_tenant(), new_id()
        assert await store.add_checkpoint(tenant, sid, make_checkpoint("a"), max_count=10, max_bytes=1000) == []
        await create(store, make_session(tenant, sid))
        assert await checkpoint_ids(store, tenant, sid) == []

    async def test_delete_session_removes_its_checkpoints(self, store: SessionStore) -> None:
        tenant, sid, keep = new_tenant(), new_id(), new_id()
        await create(store, make_session(tenant, sid))
        await create(store, make_session(tenant, keep))
        gone, kept = make_checkpoint("gone"), make_checkpoint("kept")
        await add_checkpoints(store, tenant, sid, [gone])
        await add_checkpoints(store, tenant, keep, [kept])

        assert await store.delete_session(tenant, sid) is True
        assert await checkpoint_ids(store, tenant, sid) == []
        assert await store.load_checkpoints_down_to(tenant, sid, gone.checkpoint_id) == []
        assert await checkpoint_ids(store, tenant, keep) == [kept.checkpoint_id]
        # A session re-created under the same id starts without checkpoints.
        await create(store, make_session(tenant, sid))
        assert await checkpoint_ids(store, tenant, sid) == []
