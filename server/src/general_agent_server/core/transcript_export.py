"""The transcript JSONL export (spec 8.2): one file per session at a server-chosen path,
`<root>/<tenant>/<session_id>.jsonl`, appended after commit by a buffered background writer and
reconciled against the store when a session is loaded. The store rows are the truth; the file is a
convenience for people and log shippers."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from general_agent_server.core.content import ContentPart, ImagePart, TextPart
from general_agent_server.core.jsonl_files import JsonlFiles, line_count, rewrite
from general_agent_server.core.transcript import (
    AssistantEntry,
    CompactionEntry,
    MessageEntry,
    SessionResetEntry,
    SystemPromptEntry,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)


class TranscriptSource(Protocol):
    """The part of the store the exporter reads when reconciling."""

    async def count_transcript(self, tenant: str, session_id: str) -> int: ...

    async def read_transcript(
        self, tenant: str, session_id: str, *, after_entry_id: int, limit: int
    ) -> list[TranscriptEntry]: ...


def _parts_json(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            out.append({"type": "image", "mimeType": part.mime_type, "data": base64.b64encode(part.data).decode()})
    return out


def _json_or_none(text: str) -> Any:
    return json.loads(text) if text else None


def entry_json(entry: TranscriptEntry) -> dict[str, Any]:
    """One line of the export, in the seed's field names plus `sequence` and `runId`."""
    body = entry.body
    line: dict[str, Any]
    if isinstance(body, SystemPromptEntry):
        line = {"type": "system_prompt", "prompt": body.prompt, "modelRef": body.model_ref}
    elif isinstance(body, MessageEntry):
        line = {"type": "message", "role": body.role, "content": _parts_json(body.content)}
        if body.injected:
            line["injected"] = True
    elif isinstance(body, AssistantEntry):
        line = {"type": "assistant", "text": body.text}
        if body.aborted:
            line["aborted"] = True
    elif isinstance(body, ToolCallEntry):
        line = {
            "type": "tool_call",
            "callId": body.call_id,
            "toolName": body.tool_name,
            "input": _json_or_none(body.input_json) or {},
        }
    elif isinstance(body, ToolResultEntry):
        line = {
            "type": "tool_result",
            "callId": body.call_id,
            "toolName": body.tool_name,
            "output": _parts_json(body.output),
            "isError": body.is_error,
        }
        if body.details_json:
            line["details"] = _json_or_none(body.details_json)
    elif isinstance(body, CompactionEntry):
        line = {
            "type": "compaction",
            "summary": body.summary,
            "messagesBefore": body.messages_before,
            "messagesAfter": body.messages_after,
        }
    else:
        assert isinstance(body, SessionResetEntry)
        line = {"type": "session_reset", "reason": body.reason}
    line["timestamp"] = int(entry.timestamp.timestamp() * 1000)
    line["sequence"] = entry.sequence
    if entry.run_id:
        line["runId"] = entry.run_id
    return line


class TranscriptExporter(JsonlFiles):
    """See module docstring."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, name="transcript-export")

    def append(self, tenant: str, session_id: str, entries: Sequence[TranscriptEntry]) -> None:
        self.append_lines(
            tenant, session_id, (json.dumps(entry_json(e), ensure_ascii=False, separators=(",", ":")) for e in entries)
        )

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
        lines = [json.dumps(entry_json(e), ensure_ascii=False, separators=(",", ":")) for e in entries]
        await asyncio.to_thread(rewrite, path, lines)
