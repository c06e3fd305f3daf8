"""Transcript entries as JSON in camelCase field names: the JSONL export line (`{type, ..., timestamp}`),
the toolResult-shaped message the write-path hooks see for tool results (`{role: "toolResult",
toolCallId, toolName, content, details, isError, timestamp}`), and the way back from a hook's
replacement."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
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


class EntryShapeError(ValueError):
    """A replacement that does not describe an entry of the same kind."""


def parts_json(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
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
    """One line of the export: its camelCase fields plus `sequence` and `runId`."""
    body = entry.body
    line: dict[str, Any]
    if isinstance(body, SystemPromptEntry):
        line = {"type": "system_prompt", "prompt": body.prompt, "modelRef": body.model_ref}
    elif isinstance(body, MessageEntry):
        line = {"type": "message", "role": body.role, "content": parts_json(body.content)}
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
            "output": parts_json(body.output),
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


def tool_result_message(entry: TranscriptEntry) -> dict[str, Any]:
    body = entry.body
    assert isinstance(body, ToolResultEntry)
    return {
        "role": "toolResult",
        "toolCallId": body.call_id,
        "toolName": body.tool_name,
        "content": parts_json(body.output),
        "details": _json_or_none(body.details_json),
        "isError": body.is_error,
        "timestamp": int(entry.timestamp.timestamp() * 1000),
    }


def hook_message(entry: TranscriptEntry) -> dict[str, Any]:
    """What the write-path hooks see for one entry."""
    if isinstance(entry.body, ToolResultEntry):
        return tool_result_message(entry)
    return entry_json(entry)


def entry_from_hook_message(entry: TranscriptEntry, message: Any) -> TranscriptEntry:
    """The entry a hook's replacement describes. Its kind, call id and tool name cannot change."""
    if not isinstance(message, dict):
        raise EntryShapeError("the replacement is not an object")
    return replace(entry, body=_body(entry.body, message))


def _body(original: TranscriptBody, message: dict[str, Any]) -> TranscriptBody:
    if isinstance(original, ToolResultEntry):
        if message.get("role") != "toolResult":
            raise EntryShapeError("a tool result replacement must stay toolResult-shaped")
        details = message.get("details")
        return replace(
            original,
            output=parts_from_json(message.get("content", [])),
            details_json=json.dumps(details) if details is not None else "",
            is_error=_bool(message.get("isError", original.is_error)),
        )
    if message.get("type") != original.kind:
        raise EntryShapeError(f"a {original.kind} entry cannot become {message.get('type')!r}")
    if isinstance(original, SystemPromptEntry):
        return replace(original, prompt=_text(message, "prompt"), model_ref=_text(message, "modelRef"))
    if isinstance(original, MessageEntry):
        return replace(
            original,
            content=parts_from_json(message.get("content", [])),
            injected=_bool(message.get("injected", False)),
        )
    if isinstance(original, AssistantEntry):
        return replace(original, text=_text(message, "text"), aborted=_bool(message.get("aborted", False)))
    if isinstance(original, ToolCallEntry):
        return replace(original, input_json=json.dumps(message.get("input", {}), separators=(",", ":")))
    if isinstance(original, CompactionEntry):
        return replace(original, summary=_text(message, "summary"))
    assert isinstance(original, SessionResetEntry)
    return replace(original, reason=_text(message, "reason"))


def parts_from_json(raw: Any) -> tuple[ContentPart, ...]:
    if not isinstance(raw, list):
        raise EntryShapeError("content must be a list of parts")
    parts: list[ContentPart] = []
    for item in raw:
        if not isinstance(item, dict):
            raise EntryShapeError("a content part must be an object")
        if item.get("type") == "text":
            parts.append(TextPart(text=_text(item, "text")))
        elif item.get("type") == "image":
            try:
                data = base64.b64decode(_text(item, "data"), validate=True)
            except (binascii.Error, ValueError):
                raise EntryShapeError("an image part needs base64 data") from None
            parts.append(ImagePart(mime_type=_text(item, "mimeType"), data=data))
        else:
            raise EntryShapeError(f"unknown content part type {item.get('type')!r}")
    return tuple(parts)


def _text(message: dict[str, Any], key: str) -> str:
    value = message.get(key, "")
    if not isinstance(value, str):
        raise EntryShapeError(f"{key} must be a string")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EntryShapeError("expected a boolean")
    return value
