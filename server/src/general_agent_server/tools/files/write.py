"""`write`: creates or overwrites a file in the workspace (parent directories created), atomically."""

from __future__ import annotations

from typing import Any

from general_agent_server.tools.files.file_mutation import LockedFileTool, path_argument
from general_agent_server.tools.runtime import ToolContext, ToolOutcome, ToolSpec
from general_agent_server.workspace.workspace import Workspace

SPEC = ToolSpec(
    name="write",
    description=(
        "Write a file in the workspace: creates it (and missing parent directories) or overwrites it entirely "
        "with the given content."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    read_only=False,
)


class WriteTool(LockedFileTool):
    spec = SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        workspace = Workspace(context.workspace)
        raw = path_argument(arguments)
        content = str(arguments["content"])
        path = await self._locked(arguments, context, lambda: workspace.write_bytes(raw, content.encode("utf-8")))
        # The pieces between line breaks, so a final line without a break still counts.
        lines = content.count("\n") + 1
        return ToolOutcome.text(f"Successfully wrote {lines} lines to {path.display}", {"path": path.display})
