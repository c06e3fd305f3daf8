"""`read`: text files with line numbers (offset/limit), images by magic bytes as image blocks."""

from __future__ import annotations

import asyncio
from typing import Any

from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec, image_outcome
from general_agent_server.workspace.workspace import Workspace

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
MAX_IMAGE_BYTES = 5 * 1024 * 1024

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

SPEC = ToolSpec(
    name="read",
    description=(
        "Read a file from the workspace. Text comes back with line numbers (cat -n style); use offset and "
        "limit for long files. PNG, JPEG, GIF and WebP images come back as images."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": f"Lines to read (default {DEFAULT_LIMIT})."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    read_only=True,
)


def _image_type(head: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if head.startswith(magic):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _read(workspace: Workspace, raw_path: str, offset: int, limit: int) -> ToolOutcome:
    data, path = workspace.read_bytes(raw_path)
    shown = path.display
    mime = _image_type(data[:16])
    if mime is not None:
        if len(data) > MAX_IMAGE_BYTES:
            raise ToolFailure(f"image {shown} is {len(data)} bytes; the limit is {MAX_IMAGE_BYTES}")
        return image_outcome(data, mime, f"Image {shown} ({mime}, {len(data)} bytes)")
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if offset > max(len(lines), 1):
        raise ToolFailure(f"offset {offset} is beyond the end of {shown} ({len(lines)} lines)")
    window = lines[offset - 1 : offset - 1 + limit]
    numbered = []
    for number, line in enumerate(window, start=offset):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + "… [line truncated]"
        numbered.append(f"{number:6}\t{line}")
    body = "\n".join(numbered)
    end = offset - 1 + len(window)
    if end < len(lines):
        body += f"\n\n[showing lines {offset}-{end} of {len(lines)}; use offset={end + 1} to continue]"
    details = {"path": shown, "total_lines": len(lines), "start_line": offset, "end_line": end}
    return ToolOutcome.text(body or "(empty file)", details)


class ReadTool:
    spec = SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        offset = int(arguments.get("offset", 1))
        limit = int(arguments.get("limit", DEFAULT_LIMIT))
        return await asyncio.to_thread(_read, Workspace(context.workspace), str(arguments["path"]), offset, limit)
