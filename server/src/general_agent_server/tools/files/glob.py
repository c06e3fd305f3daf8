"""`glob`: files whose path (relative to the searched directory) matches a glob pattern, newest first.

Patterns use shell glob syntax with `**` for any number of directories and `{a,b}` alternatives
(wcmatch); `*` also matches names starting with a dot. Only regular files are listed: symbolic links are
neither listed nor followed, and version-control directories are skipped (file_walk.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from wcmatch import glob as wildcard

from general_agent_server.tools.files.file_walk import printable, regular_files
from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from general_agent_server.workspace.workspace import Workspace

MAX_FILES = 1000
PATTERN_FLAGS = wildcard.GLOBSTAR | wildcard.DOTGLOB | wildcard.BRACE | wildcard.CASE

SPEC = ToolSpec(
    name="glob",
    description=(
        "Find files by name pattern, newest first. Patterns are relative to `path` (default: the workspace): "
        "'*.py' matches in that directory only, '**/*.py' at any depth, 'src/**/*.{ts,tsx}' below src. "
        f"At most {MAX_FILES} files are listed."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern, e.g. '**/*.py'."},
            "path": {"type": "string", "description": "Directory to search, relative to the workspace."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    read_only=True,
)


def _pattern(raw: str) -> str:
    if raw.startswith("/"):
        raise ToolFailure("pattern must be relative to path (give the directory to search as path)")
    while raw.startswith("./"):
        raw = raw[2:]
    return raw


_NO_FILES = ToolOutcome.text("No files found.", {"count": 0, "truncated": False})


def _every_dir(relative: str) -> bool:
    return True


def _glob(workspace: Workspace, raw_path: str, pattern: str) -> ToolOutcome:
    # Compiled once: matching each file with the pattern text would expand its braces again for every file.
    matcher = wildcard.compile(pattern, flags=PATTERN_FLAGS)
    # A pattern without a slash or `**` names files of the searched directory only: nothing below it is walked.
    top_only = "/" not in pattern and "**" not in pattern
    try:
        with workspace.open_dir(raw_path) as (base_fd, base):
            files = regular_files(base_fd, skip_dir=_every_dir if top_only else None)
            found = [(file.mtime_ns, file.relative) for file in files if matcher.match(file.relative)]
    except ToolFailure:
        if workspace.names_unborn_root(raw_path):
            return _NO_FILES  # nothing was written into it yet: the workspace is empty
        raise
    if not found:
        return _NO_FILES
    # Newest first; the path breaks ties so the order is stable.
    found.sort(key=lambda item: (-item[0], item[1]))
    prefix = "" if not base.parts else base.display + "/"
    shown = [printable(prefix + relative) for _, relative in found[:MAX_FILES]]
    text = "\n".join(shown)
    if len(found) > MAX_FILES:
        text += f"\n\n[showing the {MAX_FILES} newest of {len(found)} files; narrow the pattern or path to see more]"
    return ToolOutcome.text(text, {"count": len(found), "truncated": len(found) > MAX_FILES})


class GlobTool:
    spec = SPEC

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        pattern = _pattern(str(arguments["pattern"]))
        raw_path = str(arguments.get("path") or ".")
        return await asyncio.to_thread(_glob, Workspace(context.workspace), raw_path, pattern)
