"""An MCP server's tool as a local tool of the session: its input schema passed through, its result turned
into content the model reads (text and images; anything else described as text), `structuredContent` as the
details hosts and hooks see, and `isError` as a tool_error."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp_types

from general_agent_server.domain.content import IMAGE_MIME_TYPES, ContentPart, ImagePart, TextPart
from general_agent_server.mcp_servers.connection import McpCallError, McpConnection
from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolKind, ToolOutcome, ToolSpec


class McpTool:
    """Calls `tool` on the server behind `connection`; the model knows it as `spec.name`."""

    def __init__(self, spec: ToolSpec, connection: McpConnection, tool: str) -> None:
        self._spec = spec
        self._connection = connection
        self._tool = tool

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        try:
            result = await self._connection.call(self._tool, arguments)
        except McpCallError as exc:
            raise ToolFailure(str(exc)) from None
        return outcome(result)


def tool_spec(server: str, exposed: str, tool: mcp_types.Tool, timeout_seconds: float) -> ToolSpec:
    annotations = tool.annotations
    read_only = bool(annotations is not None and annotations.read_only_hint)
    description = tool.description or tool.title or f"The {tool.name} tool of the MCP server {server}."
    return ToolSpec(
        name=exposed,
        description=description,
        input_schema=tool.input_schema or {"type": "object"},
        kind=ToolKind.MCP,
        # The call itself is bounded by the connection (mcp_call_timeout); this is the runtime's outer bound.
        timeout_seconds=timeout_seconds + 5,
        read_only=read_only,
    )


def outcome(result: mcp_types.CallToolResult) -> ToolOutcome:
    parts: list[ContentPart] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(TextPart(text=block.text))
        elif isinstance(block, mcp_types.ImageContent) and (image := _image(block)) is not None:
            parts.append(image)
        else:
            parts.append(TextPart(text=json.dumps(block.model_dump(mode="json", exclude_none=True, by_alias=True))))
    if not parts:
        parts.append(TextPart(text=json.dumps(result.structured_content) if result.structured_content else ""))
    details = json.dumps(result.structured_content) if result.structured_content is not None else ""
    return ToolOutcome(content=tuple(parts), details_json=details, is_error=result.is_error)


def _image(block: mcp_types.ImageContent) -> ImagePart | None:
    if block.mime_type not in IMAGE_MIME_TYPES:
        return None
    try:
        return ImagePart(mime_type=block.mime_type, data=base64.b64decode(block.data, validate=True))
    except (binascii.Error, ValueError):
        return None
