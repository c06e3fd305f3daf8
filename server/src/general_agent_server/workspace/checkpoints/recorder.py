"""Durable file checkpoints (docs/tools.md, checkpoints): every mutating tool call records the prior state of the files
it touches; failed calls are rolled back and record nothing; a restore rewinds linearly from the newest checkpoint down
to and including the chosen one.

Checkpoints live in the session store, bounded per session by count and by stored bytes. The bound always
drops the oldest first: a gap in the middle of the chain would make a later rewind skip a change."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.tools.runtime import ToolContext, ToolOutcome
from general_agent_server.workspace.checkpoints.files import CheckpointFile, CheckpointFileError, put_back, snapshot

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """What one mutating tool call changed, with the prior bytes a restore writes back."""

    checkpoint_id: str
    run_id: str
    call_id: str
    tool_name: str
    created_at: datetime
    files: tuple[CheckpointFile, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    @property
    def stored_bytes(self) -> int:
        return sum(len(f.prior_content) for f in self.files)

    def listed(self, position: int) -> CheckpointInfo:
        """How the checkpoint is listed once a store has given it `position`."""
        return CheckpointInfo(
            position=position,
            checkpoint_id=self.checkpoint_id,
            run_id=self.run_id,
            call_id=self.call_id,
            tool_name=self.tool_name,
            created_at=self.created_at,
            paths=self.paths,
            stored_bytes=self.stored_bytes,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointInfo:
    """A checkpoint as listed (no file contents). `position` orders a session's checkpoints (higher = newer)."""

    position: int
    checkpoint_id: str
    run_id: str
    call_id: str
    tool_name: str
    created_at: datetime
    paths: tuple[str, ...]
    stored_bytes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointBounds:
    """Per-session limits (settings checkpoint_max_count / checkpoint_max_bytes)."""

    max_count: int
    max_bytes: int


def beyond_bounds(sizes: Iterable[tuple[str, int]], *, max_count: int, max_bytes: int) -> list[str]:
    """Of a session's checkpoints as (checkpoint_id, stored_bytes), oldest first, the ids that a store drops, oldest
    first, until the rest is within `max_count` and `max_bytes`."""
    listed = list(sizes)
    count, total = len(listed), sum(size for _, size in listed)
    dropped: list[str] = []
    for checkpoint_id, size in listed:
        if count <= max_count and total <= max_bytes:
            break
        dropped.append(checkpoint_id)
        count, total = count - 1, total - size
    return dropped


@dataclass(frozen=True, kw_only=True, slots=True)
class RestoreResult:
    """What RestoreCheckpoint answers: the workspace-relative paths written or removed, and how many
    checkpoints were undone (the chosen one and every newer one)."""

    restored_paths: tuple[str, ...]
    checkpoints_undone: int


class CheckpointStore(Protocol):
    """The checkpoint part of the session store (store/port.py SessionStore extends it), tenant-scoped."""

    async def add_checkpoint(
        self, tenant: str, session_id: str, checkpoint: Checkpoint, *, max_count: int, max_bytes: int
    ) -> list[str]:
        """Stores `checkpoint` as the session's newest, then drops the oldest (the new one last) until at most
        `max_count` remain holding at most `max_bytes` of prior content; returns the dropped ids. Stores
        nothing when the session does not exist (a tool that finished after a delete leaves no orphans)."""
        ...

    async def list_checkpoints(
        self, tenant: str, session_id: str, *, before_position: int = 0, limit: int
    ) -> list[CheckpointInfo]:
        """Newest first; with `before_position` > 0 only those older than that position."""
        ...

    async def load_checkpoints_down_to(self, tenant: str, session_id: str, checkpoint_id: str) -> list[Checkpoint]:
        """Every checkpoint from the newest down to and including `checkpoint_id`, newest first, with contents;
        empty when the id is unknown in this session."""
        ...

    async def delete_checkpoints(self, tenant: str, session_id: str, checkpoint_ids: Sequence[str]) -> None: ...


def checkpoint_not_found(checkpoint_id: str) -> ServiceError:
    return ServiceError(
        ErrorCode.NOT_FOUND,
        "CHECKPOINT_NOT_FOUND",
        f"Unknown checkpoint: {checkpoint_id}",
        metadata={"checkpoint_id": checkpoint_id},
    )


class CheckpointRecorder:
    """Records checkpoints around mutating tool calls and restores them. One per server: the tool context
    and the restore arguments name the session."""

    def __init__(self, store: CheckpointStore, bounds: CheckpointBounds) -> None:
        self._store = store
        self._bounds = bounds

    async def around(
        self,
        context: ToolContext,
        tool_name: str,
        paths: Sequence[Path],
        mutation: Callable[[], Awaitable[ToolOutcome]],
    ) -> ToolOutcome:
        """Runs `mutation` with the prior state of `paths` captured: an error outcome (or an exception, or
        cancellation) puts the files back and records nothing; success stores a checkpoint."""
        try:
            files = await asyncio.to_thread(snapshot, context.workspace, paths)
        except CheckpointFileError as exc:
            # Refusing beats making a change that could not be undone.
            return ToolOutcome.error(f"{tool_name}: {exc}")
        if not files:
            return await mutation()
        try:
            outcome = await mutation()
        except BaseException:
            # Stopped or cancelled mid-call: the call did not complete, so its partial change is undone.
            # Synchronously, so a second cancellation cannot interrupt the undo.
            _undo(context.workspace, files)
            raise
        if outcome.is_error:
            await asyncio.to_thread(_undo, context.workspace, files)
            return outcome
        checkpoint = Checkpoint(
            checkpoint_id=str(uuid.uuid4()),
            run_id=context.run_id,
            call_id=context.call_id,
            tool_name=tool_name,
            created_at=utcnow(),
            files=tuple(files),
        )
        try:
            await self._store.add_checkpoint(
                context.tenant,
                context.session_id,
                checkpoint,
                max_count=self._bounds.max_count,
                max_bytes=self._bounds.max_bytes,
            )
        except Exception:
            # A change nobody could rewind breaks the promise that every mutation is undoable: undo it instead.
            logger.exception("storing checkpoint failed", extra={"category": "tool_result"})
            await asyncio.to_thread(_undo, context.workspace, files)
            return ToolOutcome.error(f"{tool_name}: the change was undone because its checkpoint could not be stored")
        return outcome

    async def restore(self, tenant: str, session_id: str, checkpoint_id: str, workspace: Path) -> RestoreResult:
        """Linear rewind to before `checkpoint_id`. Raises CHECKPOINT_NOT_FOUND for an id unknown here."""
        checkpoints = await self._store.load_checkpoints_down_to(tenant, session_id, checkpoint_id)
        if not checkpoints:
            raise checkpoint_not_found(checkpoint_id)
        try:
            # Newest first, so for a file touched several times the oldest prior state is written last.
            await asyncio.to_thread(put_back, workspace, [f for c in checkpoints for f in c.files])
        except CheckpointFileError as exc:
            raise ServiceError(
                ErrorCode.INTERNAL, "INTERNAL", f"could not restore checkpoint {checkpoint_id}: {exc}"
            ) from exc
        # Records are dropped only after every file is back: a crash before this line leaves them all, and a
        # second restore writes the same prior states again.
        await self._store.delete_checkpoints(tenant, session_id, [c.checkpoint_id for c in checkpoints])
        restored = dict.fromkeys(f.path for c in checkpoints for f in c.files)
        return RestoreResult(restored_paths=tuple(restored), checkpoints_undone=len(checkpoints))


def _undo(workspace: Path, files: Sequence[CheckpointFile]) -> None:
    """Puts back what it can: one file that cannot be restored must not keep the others changed."""
    for file in files:
        try:
            put_back(workspace, [file])
        except CheckpointFileError as exc:
            logger.warning("rolling back a failed tool call left %s", exc, extra={"category": "tool_result"})
