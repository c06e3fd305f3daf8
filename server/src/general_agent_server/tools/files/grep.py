"""`grep`: lines matching a regular expression in the files of a directory (or in one file), as
`path:line:text`. ripgrep searches directories when it is installed; otherwise, and for a single file, the
search runs in-process with the same results (grep_python.py)."""

from __future__ import annotations

import asyncio
import stat
from typing import Any

from general_agent_server.tools.files.file_walk import printable
from general_agent_server.tools.files.grep_python import GrepQuery, GrepResult, search_bytes, search_tree
from general_agent_server.tools.files.grep_ripgrep import can_run_in_descriptor, search_with_ripgrep
from general_agent_server.tools.runtime import ToolContext, ToolOutcome, ToolSpec
from general_agent_server.workspace.workspace import Workspace, WorkspacePath

MAX_MATCHES = 500
MAX_LINE_CHARS = 500

SPEC = ToolSpec(
    name="grep",
    description=(
        "Search file contents with a regular expression (Rust/Python regex syntax). Returns matching lines as "
        f"path:line:text, at most {MAX_MATCHES}. Searches the workspace, or `path` (a directory or a file); "
        "`glob` filters files, e.g. '*.py' (a file name at any depth) or 'src/**/*.ts' (relative to path); "
        "a leading '!' excludes. Hidden files are searched; binary files and symbolic links are skipped."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to search for."},
            "path": {"type": "string", "description": "Directory or file to search, relative to the workspace."},
            "glob": {"type": "string", "description": "Only search files matching this glob."},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    read_only=True,
)


def _format(result: GrepResult, where: WorkspacePath, single_file: bool) -> str:
    if not result.matches:
        return "No matches found."
    prefix = "" if not where.parts else where.display + "/"
    lines = []
    for match in result.matches:
        path = where.display if single_file else prefix + match.path
        text = match.text
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + "… [line truncated]"
        lines.append(f"{printable(path)}:{match.line_number}:{text}")
    body = "\n".join(lines)
    if result.truncated:
        body += f"\n\n[showing the first {MAX_MATCHES} matching lines; narrow the pattern, path or glob to see more]"
    return body


def _search_file(workspace: Workspace, raw_path: str, query: GrepQuery) -> tuple[GrepResult, WorkspacePath]:
    data, path = workspace.read_bytes(raw_path)
    return search_bytes(data, query), path


def _search_tree(workspace: Workspace, raw_path: str, query: GrepQuery) -> tuple[GrepResult, WorkspacePath]:
    with workspace.open_dir(raw_path) as (base_fd, base):
        return search_tree(base_fd, query), base


class GrepTool:
    spec = SPEC

    def __init__(self, ripgrep: str | None) -> None:
        """`ripgrep`: the rg executable (grep_ripgrep.find_ripgrep()), or None to always search in-process."""
        self._ripgrep = ripgrep if ripgrep and can_run_in_descriptor() else None

    @property
    def engine(self) -> str:
        return "ripgrep" if self._ripgrep else "python"

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        query = GrepQuery(
            pattern=str(arguments["pattern"]),
            case_insensitive=bool(arguments.get("case_insensitive", False)),
            glob=str(arguments["glob"]) if arguments.get("glob") else None,
            max_matches=MAX_MATCHES,
        )
        workspace = Workspace(context.workspace)
        raw_path = str(arguments.get("path") or ".")
        status, target = await asyncio.to_thread(workspace.stat, raw_path)
        engine = self.engine
        if status is None and not target.parts and workspace.unborn:
            return ToolOutcome.text("No matches found.", {"matches": 0, "truncated": False, "engine": engine})
        if status is not None and not stat.S_ISDIR(status.st_mode):
            result, where = await asyncio.to_thread(_search_file, workspace, raw_path, query)
            single_file, engine = True, "python"
        elif self._ripgrep is None:
            result, where = await asyncio.to_thread(_search_tree, workspace, raw_path, query)
            single_file = False
        else:
            with workspace.open_dir(raw_path) as (base_fd, where):
                result = await search_with_ripgrep(self._ripgrep, base_fd, query)
            single_file = False
        details = {"matches": len(result.matches), "truncated": result.truncated, "engine": engine}
        return ToolOutcome.text(_format(result, where, single_file), details)
