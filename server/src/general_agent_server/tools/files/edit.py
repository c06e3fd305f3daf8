"""`edit`: replaces one unique occurrence of a text in a file, matched exactly or else tolerantly
(text_match.py); the file keeps its BOM and line endings, and the model gets a numbered diff back."""

from __future__ import annotations

from typing import Any

from general_agent_server.tools.files.file_mutation import LockedFileTool, path_argument
from general_agent_server.tools.files.line_diff import numbered_diff
from general_agent_server.tools.files.text_file import TextFile, to_lf
from general_agent_server.tools.files.text_match import find_text
from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from general_agent_server.workspace.workspace import Workspace

SPEC = ToolSpec(
    name="edit",
    description=(
        "Edit a file by replacing exact text. oldText must occur exactly once in the file (include enough "
        "surrounding lines to make it unique), including whitespace and line breaks. Use this for precise, "
        "surgical edits; use write to replace a whole file."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "oldText": {"type": "string", "description": "The exact text to find and replace."},
            "newText": {"type": "string", "description": "The text to put in its place."},
        },
        "required": ["path", "oldText", "newText"],
        "additionalProperties": False,
    },
    read_only=False,
)


def _edit(workspace: Workspace, raw: str, old_text: str, new_text: str) -> ToolOutcome:
    data, path = workspace.read_bytes(raw)
    file = TextFile.decode(data, raw)
    old, new = to_lf(old_text), to_lf(new_text)
    if not old:
        raise ToolFailure(f"oldText must not be empty in {raw}.")
    matches = find_text(file.text, old)
    if not matches.spans:
        raise ToolFailure(
            f"Could not find the exact text in {raw}. The old text must match exactly including all whitespace "
            "and newlines."
        )
    if len(matches.spans) > 1:
        raise ToolFailure(
            f"Found {len(matches.spans)} occurrences of the text in {raw}. The text must be unique. Please provide "
            "more context to make it unique."
        )
    start, end = matches.spans[0]
    updated = file.text[:start] + new + file.text[end:]
    if updated == file.text:
        raise ToolFailure(f"No changes made to {raw}. The replacement produced identical content.")
    workspace.write_bytes(path, file.encode(updated))
    diff = numbered_diff(file.text, updated)
    details = {"path": path.display, "first_changed_line": diff.first_changed_line, "fuzzy_match": matches.fuzzy}
    return ToolOutcome.text(f"Successfully replaced text in {raw}.\n\n{diff.text}", details)


class EditTool(LockedFileTool):
    spec = SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        workspace = Workspace(context.workspace)
        raw = path_argument(arguments)
        old_text, new_text = str(arguments["oldText"]), str(arguments["newText"])
        return await self._locked(arguments, context, lambda: _edit(workspace, raw, old_text, new_text))
