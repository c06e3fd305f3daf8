"""Transcript entries."""

from __future__ import annotations

from general_agent.v1 import transcript_pb2
from general_agent_server.api.convert.content import parts_to_proto
from general_agent_server.api.convert.values import struct_from_json, timestamp, value_from_json
from general_agent_server.domain import transcript as tr


def transcript_to_proto(entry: tr.TranscriptEntry) -> transcript_pb2.TranscriptEntry:
    out = transcript_pb2.TranscriptEntry(
        sequence=entry.sequence, timestamp=timestamp(entry.timestamp), run_id=entry.run_id
    )
    body = entry.body
    if isinstance(body, tr.SystemPromptEntry):
        out.system_prompt.prompt = body.prompt
        out.system_prompt.model_ref = body.model_ref
    elif isinstance(body, tr.MessageEntry):
        out.message.role = body.role
        out.message.content.extend(parts_to_proto(body.content))
        out.message.injected = body.injected
    elif isinstance(body, tr.AssistantEntry):
        out.assistant.text = body.text
        out.assistant.aborted = body.aborted
    elif isinstance(body, tr.ToolCallEntry):
        out.tool_call.call_id = body.call_id
        out.tool_call.tool_name = body.tool_name
        out.tool_call.input.CopyFrom(struct_from_json(body.input_json))
    elif isinstance(body, tr.ToolResultEntry):
        out.tool_result.call_id = body.call_id
        out.tool_result.tool_name = body.tool_name
        out.tool_result.output.extend(parts_to_proto(body.output))
        out.tool_result.is_error = body.is_error
        if (value := value_from_json(body.details_json)) is not None:
            out.tool_result.details.CopyFrom(value)
    elif isinstance(body, tr.CompactionEntry):
        out.compaction.summary = body.summary
        out.compaction.messages_before = body.messages_before
        out.compaction.messages_after = body.messages_after
    elif isinstance(body, tr.SessionResetEntry):
        out.session_reset.reason = body.reason
    return out
