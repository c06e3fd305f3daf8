"""The transcript JSONL export (README, Operating it): one file per session at a server-chosen path,
`<root>/<tenant>/<session_id>.jsonl`, appended after commit by a buffered background writer and
reconciled against the store when a session is loaded. The store rows are the truth; the file is a
convenience for people and log shippers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.exports.jsonl_files import JsonlFiles, line_count, rewrite
from general_agent_server.exports.transcript_json import entry_json


class TranscriptSource(Protocol):
    """The part of the store the exporter reads when reconciling."""

    async def count_transcript(self, tenant: str, session_id: str) -> int: ...

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]: ...


class TranscriptExporter(JsonlFiles):
    """See module docstring."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, name="transcript-export")

    def append(self, tenant: str, session_id: str, entries: Sequence[TranscriptEntry]) -> None:
        """Encoded on the writing thread, off the commit's path (the entries are immutable)."""
        self.append_lines(tenant, session_id, map(_line, tuple(entries)))

    async def reconcile(self, tenant: str, session_id: str, source: TranscriptSource) -> None:
        """Rewrites the file from the store when its line count disagrees with the stored entries (a crash
        between commit and export, or a deleted file)."""
        await self.flush()
        path = self.path_for(tenant, session_id)
        stored = await source.count_transcript(tenant, session_id)
        lines_on_disk = await asyncio.to_thread(line_count, path)
        if lines_on_disk == stored or (lines_on_disk < 0 and stored == 0):
            return
        entries = await source.read_transcript(tenant, session_id, after_entry_id=0, limit=stored + 1)
        lines = [_line(e) for e in entries]
        await asyncio.to_thread(rewrite, path, lines)


def _line(entry: TranscriptEntry) -> str:
    return json.dumps(entry_json(entry), ensure_ascii=False, separators=(",", ":"))
