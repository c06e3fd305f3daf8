"""File checkpoints: the recorder around mutating tools (through ToolSet.execute, as the runner calls it),
linear restore, bounds, durability across a store reopen, crash-safe ordering, and the list/restore service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.store.port import StoreError
from general_agent_server.store.sqlite import SqliteSessionStore
from general_agent_server.store.testing.factories import make_session
from general_agent_server.tools.runtime import (
    MutatingTool,
    ToolContext,
    ToolFailure,
    ToolLimits,
    ToolOutcome,
    ToolSet,
    ToolSpec,
)
from general_agent_server.workspace.checkpoints import recorder as checkpoints_module
from general_agent_server.workspace.checkpoints.files import CheckpointFile, CheckpointFileError, put_back
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointBounds, CheckpointRecorder
from general_agent_server.workspace.checkpoints.service import CheckpointService
from general_agent_server.workspace.workspace import resolve_in_workspace

TENANT, SESSION = "default", "s-checkpoints"
ROOMY = CheckpointBounds(max_count=100, max_bytes=1 << 20)


class FakeWrite:
    """A minimal mutating tool: writes `content` to every path in `paths`, then ends as `mode` says."""

    def __init__(self, mode: str = "ok", *, timeout_seconds: float | None = None) -> None:
        self.spec = ToolSpec(
            name="write",
            description="write files",
            input_schema={"type": "object"},
            read_only=False,
            timeout_seconds=timeout_seconds,
        )
        self.mode = mode
        self.ran = False
        self.wrote = asyncio.Event()

    def touched_paths(self, arguments: dict[str, Any], context: ToolContext) -> list[Path]:
        return [resolve_in_workspace(context.workspace, p) for p in arguments["paths"]]

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        self.ran = True
        for path in self.touched_paths(arguments, context):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(arguments["content"])
        self.wrote.set()
        if self.mode == "failure":
            raise ToolFailure("boom")
        if self.mode == "error":
            return ToolOutcome.error("nope")
        if self.mode == "crash":
            raise RuntimeError("bug")
        if self.mode == "hang":
            await asyncio.Event().wait()
        return ToolOutcome.text("ok")


class FailingAdds:
    """A store whose add_checkpoint fails (the rest is the real store)."""

    def __init__(self, store: SqliteSessionStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def add_checkpoint(self, *args: Any, **kwargs: Any) -> list[str]:
        raise StoreError("disk full")


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (what "exactly as before" compares)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteSessionStore]:
    store = SqliteSessionStore(tmp_path / "state.sqlite3", flush_interval=0.005)
    await store.open()
    await store.create_session(make_session(TENANT, SESSION))
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


class Harness:
    def __init__(self, store: SqliteSessionStore, workspace: Path, bounds: CheckpointBounds = ROOMY) -> None:
        self.store = store
        self.workspace = workspace
        self.recorder = CheckpointRecorder(store, bounds)
        self.calls = 0

    def context(self, recorder: CheckpointRecorder | None = None) -> ToolContext:
        self.calls += 1
        return ToolContext(
            tenant=TENANT,
            session_id=SESSION,
            run_id="run-1",
            call_id=f"call-{self.calls}",
            workspace=self.workspace,
            checkpoints=recorder or self.recorder,
        )

    async def write(self, *paths: str, content: str, tool: FakeWrite | None = None) -> ToolOutcome:
        tool = tool or FakeWrite()
        tools = ToolSet([tool.spec], {"write": tool}, ToolLimits())
        return await tools.execute("write", {"paths": list(paths), "content": content}, self.context())

    async def ids(self) -> list[str]:
        return [c.checkpoint_id for c in await self.store.list_checkpoints(TENANT, SESSION, limit=1000)]


@pytest.fixture
def harness(store: SqliteSessionStore, workspace: Path) -> Harness:
    return Harness(store, workspace)


def test_the_fake_tool_is_a_mutating_tool() -> None:
    assert isinstance(FakeWrite(), MutatingTool)


# ---------------------------------------------------------------------- recording and rollback


async def test_a_successful_write_records_the_prior_state(harness: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("before")
    outcome = await harness.write("a.txt", "sub/new.txt", content="after")

    assert not outcome.is_error
    assert tree(workspace) == {"a.txt": b"after", "sub/new.txt": b"after"}
    [info] = await harness.store.list_checkpoints(TENANT, SESSION, limit=10)
    assert (info.tool_name, info.run_id, info.call_id) == ("write", "run-1", "call-1")
    assert info.paths == ("a.txt", "sub/new.txt")
    assert info.stored_bytes == len(b"before")
    [stored] = await harness.store.load_checkpoints_down_to(TENANT, SESSION, info.checkpoint_id)
    assert stored.files == (
        CheckpointFile(path="a.txt", existed_before=True, prior_content=b"before"),
        CheckpointFile(path="sub/new.txt", existed_before=False),
    )


@pytest.mark.parametrize("mode", ["failure", "error", "crash"])
async def test_a_failed_write_is_rolled_back_and_records_nothing(harness: Harness, workspace: Path, mode: str) -> None:
    (workspace / "a.txt").write_text("before")
    outcome = await harness.write("a.txt", "new.txt", content="after", tool=FakeWrite(mode))

    assert outcome.is_error
    assert tree(workspace) == {"a.txt": b"before"}
    assert await harness.ids() == []


async def test_a_timed_out_write_is_rolled_back(harness: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("before")
    outcome = await harness.write("a.txt", content="after", tool=FakeWrite("hang", timeout_seconds=0.05))

    assert outcome.is_error
    assert "timed out" in outcome.error_text
    assert tree(workspace) == {"a.txt": b"before"}
    assert await harness.ids() == []


async def test_a_cancelled_write_is_rolled_back_and_the_cancellation_propagates(
    harness: Harness, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("before")
    tool = FakeWrite("hang")
    call = asyncio.create_task(harness.write("a.txt", "new.txt", content="after", tool=tool))
    await tool.wrote.wait()
    assert (workspace / "a.txt").read_text() == "after"
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    assert tree(workspace) == {"a.txt": b"before"}
    assert await harness.ids() == []


async def test_a_path_refused_by_touched_paths_fails_without_running(harness: Harness) -> None:
    tool = FakeWrite()
    outcome = await harness.write("../outside.txt", content="x", tool=tool)

    assert outcome.is_error
    assert "outside the workspace" in outcome.error_text
    assert not tool.ran
    assert await harness.ids() == []


async def test_a_checkpoint_that_cannot_be_stored_undoes_the_change(store: SqliteSessionStore, workspace: Path) -> None:
    (workspace / "a.txt").write_text("before")
    harness = Harness(store, workspace)
    harness.recorder = CheckpointRecorder(FailingAdds(store), ROOMY)
    outcome = await harness.write("a.txt", content="after")

    assert outcome.is_error
    assert "undone" in outcome.error_text
    assert tree(workspace) == {"a.txt": b"before"}


async def test_without_a_recorder_a_mutating_tool_just_runs(harness: Harness, workspace: Path) -> None:
    tool = FakeWrite()
    tools = ToolSet([tool.spec], {"write": tool}, ToolLimits())
    context = ToolContext(tenant=TENANT, session_id=SESSION, run_id="r", call_id="c", workspace=workspace)
    outcome = await tools.execute("write", {"paths": ["a.txt"], "content": "x"}, context)

    assert not outcome.is_error
    assert tree(workspace) == {"a.txt": b"x"}
    assert await harness.ids() == []


# ---------------------------------------------------------------------- restore


async def test_restoring_a_new_file_deletes_it(harness: Harness, workspace: Path) -> None:
    await harness.write("made/by/tool.txt", content="x")
    [checkpoint_id] = await harness.ids()

    result = await harness.recorder.restore(TENANT, SESSION, checkpoint_id, workspace)

    assert not (workspace / "made/by/tool.txt").exists()
    assert result.restored_paths == ("made/by/tool.txt",)
    assert result.checkpoints_undone == 1
    assert await harness.ids() == []


async def test_restoring_the_oldest_of_three_rewinds_everything(harness: Harness, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a0")
    (workspace / "keep").mkdir()
    (workspace / "keep/b.bin").write_bytes(b"\x00\xffb0")
    before = tree(workspace)

    await harness.write("a.txt", content="a1")
    await harness.write("a.txt", "keep/b.bin", "c.txt", content="2")
    await harness.write("keep/b.bin", content="3")
    (workspace / "keep/b.bin").unlink()  # removed behind the tools' back (e.g. by exec): restore recreates it
    oldest = (await harness.ids())[-1]

    result = await harness.recorder.restore(TENANT, SESSION, oldest, workspace)

    assert tree(workspace) == before
    assert result.checkpoints_undone == 3
    assert set(result.restored_paths) == {"a.txt", "keep/b.bin", "c.txt"}
    assert await harness.ids() == []


async def test_restoring_a_middle_checkpoint_keeps_older_ones(harness: Harness, workspace: Path) -> None:
    await harness.write("a.txt", content="1")
    await harness.write("a.txt", content="2")
    await harness.write("a.txt", content="3")
    _newest, middle, oldest = await harness.ids()

    result = await harness.recorder.restore(TENANT, SESSION, middle, workspace)

    assert (workspace / "a.txt").read_text() == "1"
    assert result.checkpoints_undone == 2
    assert await harness.ids() == [oldest]


async def test_restoring_an_unknown_checkpoint_is_checkpoint_not_found(harness: Harness, workspace: Path) -> None:
    with pytest.raises(ServiceError) as raised:
        await harness.recorder.restore(TENANT, SESSION, "nope", workspace)
    assert (raised.value.code, raised.value.reason) == (ErrorCode.NOT_FOUND, "CHECKPOINT_NOT_FOUND")
    assert raised.value.message == "Unknown checkpoint: nope"


async def test_a_restore_interrupted_midway_can_be_repeated(
    harness: Harness, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workspace / "a.txt").write_text("a0")
    before = tree(workspace)
    await harness.write("a.txt", "b.txt", content="1")
    await harness.write("a.txt", "c.txt", content="2")
    oldest = (await harness.ids())[-1]

    def crash_after_first_file(workspace: Path, files: Sequence[CheckpointFile]) -> None:
        put_back(workspace, list(files)[:1])
        raise CheckpointFileError("power cut")

    monkeypatch.setattr(checkpoints_module, "put_back", crash_after_first_file)
    with pytest.raises(ServiceError):
        await harness.recorder.restore(TENANT, SESSION, oldest, workspace)
    assert len(await harness.ids()) == 2  # records stay until every file is back
    monkeypatch.undo()

    await harness.recorder.restore(TENANT, SESSION, oldest, workspace)
    assert tree(workspace) == before
    assert await harness.ids() == []


async def test_restore_refuses_a_symlink_planted_to_leave_the_workspace(
    harness: Harness, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    await harness.write("dir/a.txt", content="x")
    [checkpoint_id] = await harness.ids()
    (workspace / "dir/a.txt").unlink()
    (workspace / "dir").rmdir()
    (workspace / "dir").symlink_to(outside)
    (outside / "a.txt").write_text("precious")

    with pytest.raises(ServiceError):
        await harness.recorder.restore(TENANT, SESSION, checkpoint_id, workspace)
    assert (outside / "a.txt").read_text() == "precious"


# ---------------------------------------------------------------------- bounds and durability


async def test_the_recorder_applies_the_count_bound(store: SqliteSessionStore, workspace: Path) -> None:
    harness = Harness(store, workspace, CheckpointBounds(max_count=2, max_bytes=1 << 20))
    for content in ("1", "2", "3"):
        await harness.write("a.txt", content=content)
    assert len(await harness.ids()) == 2
    # The oldest kept one rewinds to the state after the dropped first write.
    await harness.recorder.restore(TENANT, SESSION, (await harness.ids())[-1], workspace)
    assert (workspace / "a.txt").read_text() == "1"


async def test_the_recorder_applies_the_byte_bound(store: SqliteSessionStore, workspace: Path) -> None:
    harness = Harness(store, workspace, CheckpointBounds(max_count=100, max_bytes=10))
    (workspace / "a.txt").write_text("x" * 6)
    await harness.write("a.txt", content="y" * 6)  # stores 6 bytes
    await harness.write("a.txt", content="z")  # stores 6 more: 12 > 10, the first goes
    [info] = await store.list_checkpoints(TENANT, SESSION, limit=10)
    assert info.stored_bytes == 6
    assert len(await harness.ids()) == 1


async def test_checkpoints_survive_reopening_the_store(tmp_path: Path, workspace: Path) -> None:
    path = tmp_path / "durable.sqlite3"
    first = SqliteSessionStore(path)
    await first.open()
    try:
        await first.create_session(make_session(TENANT, SESSION))
        (workspace / "a.txt").write_text("original")
        await Harness(first, workspace).write("a.txt", "b.txt", content="changed")
    finally:
        await first.close()

    reopened = SqliteSessionStore(path)
    await reopened.open()
    try:
        harness = Harness(reopened, workspace)
        [checkpoint_id] = await harness.ids()
        await harness.recorder.restore(TENANT, SESSION, checkpoint_id, workspace)
    finally:
        await reopened.close()
    assert tree(workspace) == {"a.txt": b"original"}


# ---------------------------------------------------------------------- service


async def test_service_lists_newest_first_in_pages(harness: Harness) -> None:
    for content in ("1", "2", "3"):
        await harness.write("a.txt", content=content)
    service = CheckpointService(harness.store, harness.recorder)

    first = await service.list_checkpoints(TENANT, SESSION, page_size=2)
    second = await service.list_checkpoints(TENANT, SESSION, page_size=2, page_token=first.next_page_token)

    assert [c.checkpoint_id for c in first.checkpoints + second.checkpoints] == await harness.ids()
    assert first.next_page_token
    assert second.next_page_token == ""
    with pytest.raises(ServiceError) as raised:
        await service.list_checkpoints(TENANT, "other-session", page_token=first.next_page_token)
    assert raised.value.reason == "SESSION_NOT_FOUND"


async def test_service_hides_sessions_of_other_tenants(harness: Harness, workspace: Path) -> None:
    await harness.write("a.txt", content="x")
    [checkpoint_id] = await harness.ids()
    service = CheckpointService(harness.store, harness.recorder)

    for call in (
        service.list_checkpoints("other-tenant", SESSION),
        service.restore_checkpoint("other-tenant", SESSION, checkpoint_id, workspace),
    ):
        with pytest.raises(ServiceError) as raised:
            await call
        assert (raised.value.code, raised.value.reason) == (ErrorCode.NOT_FOUND, "SESSION_NOT_FOUND")
    assert (workspace / "a.txt").exists()


async def test_service_restores(harness: Harness, workspace: Path) -> None:
    await harness.write("a.txt", content="x")
    [checkpoint_id] = await harness.ids()
    service = CheckpointService(harness.store, harness.recorder)

    result = await service.restore_checkpoint(TENANT, SESSION, checkpoint_id, workspace)

    assert (result.restored_paths, result.checkpoints_undone) == (("a.txt",), 1)
    assert tree(workspace) == {}
    assert (await service.list_checkpoints(TENANT, SESSION)).checkpoints == ()


def test_checkpoint_sizes_count_prior_bytes_only() -> None:
    checkpoint = Checkpoint(
        checkpoint_id="c",
        run_id="r",
        call_id="k",
        tool_name="edit",
        created_at=make_session(TENANT, SESSION).create_time,
        files=(
            CheckpointFile(path="a", existed_before=True, prior_content=b"abc"),
            CheckpointFile(path="b", existed_before=False),
        ),
    )
    assert (checkpoint.paths, checkpoint.stored_bytes) == (("a", "b"), 3)
