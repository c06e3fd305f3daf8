"""Small async helpers the conformance suite reads and writes with (whole logs, id lists, bulk inserts)."""

from __future__ import annotations

from dataclasses import replace

from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.session import SessionRecord
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.port import SessionQuery, SessionStore, session_ids
from general_agent_server.workspace.checkpoints.recorder import Checkpoint

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
