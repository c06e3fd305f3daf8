"""`apply_patch`: adds, deletes, updates and moves files as a patch in the `*** Begin Patch` format says
(patch_format.py). The whole patch is checked first, against an in-memory view of the files it touches
(every path confined, every update applying), so a bad patch changes nothing; only then are the files
written (atomically each) and deleted. Updated files keep their BOM and CRLF line endings."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from general_agent_server.tools.files.file_mutation import LockedFileTool
from general_agent_server.tools.files.patch_format import AddFile, DeleteFile, Hunk, PatchSyntaxError, parse_patch
from general_agent_server.tools.files.patch_hunks import apply_chunks
from general_agent_server.tools.files.text_file import TextFile
from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from general_agent_server.workspace.workspace import Workspace, WorkspacePath

SPEC = ToolSpec(
    name="apply_patch",
    description=(
        "Apply a patch to one or more files. The input starts with '*** Begin Patch' and ends with "
        "'*** End Patch'. Between them: '*** Add File: <path>' followed by lines starting with '+'; "
        "'*** Delete File: <path>'; '*** Update File: <path>' (optionally followed by '*** Move to: <path>') "
        "followed by chunks that start with '@@' (optionally '@@ <a line just above the change>') and contain "
        "lines starting with ' ' (unchanged context), '-' (removed) or '+' (added). The whole patch is checked "
        "before any file changes."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "input": {"type": "string", "description": "Patch content using the *** Begin Patch/End Patch format."}
        },
        "required": ["input"],
        "additionalProperties": False,
    },
    read_only=False,
)


def parse_input(arguments: dict[str, Any]) -> list[Hunk]:
    text = arguments.get("input")
    if not isinstance(text, str) or not text.strip():
        raise ToolFailure("Provide a patch input.")
    try:
        hunks = parse_patch(text)
    except PatchSyntaxError as exc:
        raise ToolFailure(str(exc)) from None
    if not hunks:
        raise ToolFailure("No files were modified.")
    return hunks


@dataclass(slots=True)
class _FileState:
    path: WorkspacePath
    existed: bool  # on disk before the patch
    data: bytes | None  # after the hunks so far (None: deleted or absent)


class _Plan:
    """The hunks applied, in order, to an in-memory view of the files they touch."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self.files: dict[tuple[str, ...], _FileState] = {}
        self.summary: dict[str, list[str]] = {"added": [], "modified": [], "deleted": []}

    def apply(self, hunk: Hunk) -> None:
        target = self._workspace.resolve(hunk.path)
        if isinstance(hunk, AddFile):
            self._state(target, "add")
            self._set(target, hunk.contents.encode("utf-8"))
            self._record("added", target)
            return
        current = self._state(target, "delete" if isinstance(hunk, DeleteFile) else "update").data
        if isinstance(hunk, DeleteFile):
            if current is None:
                raise ToolFailure(f"Failed to delete {target.display}: File not found")
            self._set(target, None)
            self._record("deleted", target)
            return
        if current is None:
            raise ToolFailure(f"Failed to read file to update {target.display}: File not found")
        file = TextFile.decode(current, target.display)
        updated = file.encode(apply_chunks(file.text, hunk.chunks, target.display))
        destination = target if hunk.move_path is None else self._workspace.resolve(hunk.move_path)
        if destination != target:
            self._state(destination, "move to")
            self._set(target, None)
        self._set(destination, updated)
        self._record("modified", destination)

    def commit(self) -> None:
        """Writes first, then deletes: a failure part-way leaves no file lost (the checkpoint wrapper rolls the
        rest back)."""
        for state in self.files.values():
            if state.data is not None:
                self._workspace.write_bytes(state.path, state.data)
        for state in self.files.values():
            if state.data is None and state.existed:
                self._workspace.delete(state.path)

    def _state(self, path: WorkspacePath, action: str) -> _FileState:
        state = self.files.get(path.parts)
        if state is not None:
            return state
        status, _ = self._workspace.stat(path)
        if status is not None and not stat.S_ISREG(status.st_mode):
            raise ToolFailure(f"Failed to {action} {path.display}: it is not a regular file")
        data = self._workspace.read_bytes(path)[0] if status is not None else None
        state = _FileState(path=path, existed=data is not None, data=data)
        self.files[path.parts] = state
        return state

    def _set(self, path: WorkspacePath, data: bytes | None) -> None:
        self.files[path.parts].data = data

    def _record(self, bucket: str, path: WorkspacePath) -> None:
        if path.display not in self.summary[bucket]:
            self.summary[bucket].append(path.display)


def _apply(workspace: Workspace, hunks: list[Hunk]) -> ToolOutcome:
    plan = _Plan(workspace)
    for hunk in hunks:
        plan.apply(hunk)
    plan.commit()
    lines = ["Success. Updated the following files:"]
    for bucket, letter in (("added", "A"), ("modified", "M"), ("deleted", "D")):
        lines.extend(f"{letter} {path}" for path in plan.summary[bucket])
    return ToolOutcome.text("\n".join(lines), {"summary": plan.summary})


class ApplyPatchTool(LockedFileTool):
    spec = SPEC

    def touched_paths(self, arguments: dict[str, Any], context: ToolContext) -> list[Path]:
        """Every path in the patch and every move destination, resolved and de-duplicated."""
        workspace = Workspace(context.workspace)
        paths: dict[Path, None] = {}
        for hunk in parse_input(arguments):
            paths[workspace.resolve(hunk.path).absolute] = None
            if isinstance(hunk, AddFile | DeleteFile) or hunk.move_path is None:
                continue
            paths[workspace.resolve(hunk.move_path).absolute] = None
        return list(paths)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        hunks = parse_input(arguments)
        workspace = Workspace(context.workspace)
        return await self._locked(arguments, context, lambda: _apply(workspace, hunks))
