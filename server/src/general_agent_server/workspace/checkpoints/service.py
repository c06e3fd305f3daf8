"""ListCheckpoints and RestoreCheckpoint below the transport. The caller serialises a restore with the
session's runs (a restore while a run is active is SESSION_BUSY, decided by the caller)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from general_agent_server.domain.errors import invalid_argument, session_not_found
from general_agent_server.domain.validation import check_session_id, check_token
from general_agent_server.sessions.paging import decode_token, encode_token, filters_digest, invalid_token
from general_agent_server.store.port import SessionStore
from general_agent_server.workspace.checkpoints.recorder import CheckpointInfo, CheckpointRecorder, RestoreResult

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointPage:
    """Newest first; `next_page_token` is empty on the last page."""

    checkpoints: tuple[CheckpointInfo, ...]
    next_page_token: str


class CheckpointService:
    def __init__(self, store: SessionStore, recorder: CheckpointRecorder) -> None:
        self._store = store
        self._recorder = recorder

    async def list_checkpoints(
        self, tenant: str, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> CheckpointPage:
        await self._require_session(tenant, session_id)
        if page_size < 0:
            raise invalid_argument("page_size", "must not be negative")
        limit = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        digest = filters_digest({"checkpoints": session_id})
        before = 0
        if page_token:
            before = decode_token(page_token, digest).get("b", 0)
            if not isinstance(before, int) or before <= 0:
                raise invalid_token("malformed")
        rows = await self._store.list_checkpoints(tenant, session_id, before_position=before, limit=limit + 1)
        page = tuple(rows[:limit])
        next_token = encode_token({"b": page[-1].position}, digest) if len(rows) > limit else ""
        return CheckpointPage(checkpoints=page, next_page_token=next_token)

    async def restore_checkpoint(
        self, tenant: str, session_id: str, checkpoint_id: str, workspace: Path
    ) -> RestoreResult:
        """Rewinds the workspace to before `checkpoint_id` (it and every newer checkpoint are undone and
        removed). Errors: SESSION_NOT_FOUND, CHECKPOINT_NOT_FOUND."""
        check_token("checkpoint_id", checkpoint_id, required=True)
        await self._require_session(tenant, session_id)
        return await self._recorder.restore(tenant, session_id, checkpoint_id, workspace)

    async def _require_session(self, tenant: str, session_id: str) -> None:
        check_session_id(session_id)
        if await self._store.get_session(tenant, session_id) is None:
            raise session_not_found(session_id)
