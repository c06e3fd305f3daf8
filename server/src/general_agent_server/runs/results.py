"""Tool call results as each audience sees them: the event hosts get, the transcript entry, the committed
record, and the tool_result block the model gets in the round's results message."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from general_agent_server.domain.content import ImagePart, TextPart
from general_agent_server.domain.events import EventBody, ToolError, ToolResult
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import CallResult, CallStatus, ResolvedBy, ToolCallRecord
from general_agent_server.domain.transcript import ToolResultEntry
from general_agent_server.model.request_builder import user_content_blocks
from general_agent_server.runs.state import first_text


def result_event(record: ToolCallRecord, result: CallResult) -> EventBody:
    """The tool_result or tool_error a resolved call announces."""
    if result.is_error:
        return ToolError(
            call_id=record.call_id,
            tool_name=record.tool_name,
            error=first_text(result),
            details_json=result.details_json,
        )
    return ToolResult(
        call_id=record.call_id, tool_name=record.tool_name, output=result.content, details_json=result.details_json
    )


def result_entry(record: ToolCallRecord, result: CallResult) -> ToolResultEntry:
    return ToolResultEntry(
        call_id=record.call_id,
        tool_name=record.tool_name,
        output=result.content,
        details_json=result.details_json,
        is_error=result.is_error,
    )


def resolved(
    record: ToolCallRecord, result: CallResult, by: ResolvedBy, sequence: int, payload: str = ""
) -> ToolCallRecord:
    """The call with its result, as committed."""
    return replace(
        record,
        status=CallStatus.RESOLVED,
        result=result,
        resolved_by=by,
        payload_hash=payload,
        resolve_sequence=sequence,
    )


def tool_result_block(record: ToolCallRecord) -> dict[str, Any]:
    """A round's result as the model sees it: text-only content collapses to a string; images become
    image blocks (with a note when there is no text)."""
    result = record.result or CallResult(content=(TextPart(text="no result"),), is_error=True)
    texts = [p.text for p in result.content if isinstance(p, TextPart)]
    images = [p for p in result.content if isinstance(p, ImagePart)]
    content: Any
    if not images:
        content = "\n".join(texts)
    else:
        content = list(user_content_blocks(result.content))
        if not texts:
            content.insert(0, {"type": "text", "text": "(see attached image)"})
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": record.call_id, "content": content}
    if result.is_error:
        block["is_error"] = True
    return block


def results_message(records: list[ToolCallRecord], run_id: str) -> HistoryMessage:
    """The user message with every result of a round, in call order."""
    ordered = sorted(records, key=lambda r: r.position)
    return HistoryMessage(role="user", content=tuple(tool_result_block(r) for r in ordered), run_id=run_id)
