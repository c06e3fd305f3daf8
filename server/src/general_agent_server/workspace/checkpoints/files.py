"""The workspace side of file checkpoints: capture what files held before a mutation, and put it back.

Paths are kept workspace-relative, and every read, write and delete goes through the confined Workspace
(workspace/workspace.py): checked at open, so a link planted after the snapshot cannot lead a restore out."""

from __future__ import annotations

import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.workspace.workspace import Workspace


class CheckpointFileError(Exception):
    """A file could not be captured or put back; the message names it workspace-relative (never the server's
    absolute layout)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointFile:
    """One file's state before a mutation: its prior bytes, or that it did not exist."""

    path: str  # workspace-relative display path
    existed_before: bool
    prior_content: bytes = b""


def snapshot(workspace: Path, paths: Sequence[Path]) -> list[CheckpointFile]:
    """The prior state of each distinct file among `paths`. Directories are skipped: no file tool writes
    bytes into one, so there is nothing to put back."""
    files = Workspace(workspace)
    captured: list[CheckpointFile] = []
    seen: set[str] = set()
    for path in paths:
        try:
            status, where = files.stat(str(path))
            if where.display in seen or (status is not None and stat.S_ISDIR(status.st_mode)):
                continue
            seen.add(where.display)
            if status is None:
                captured.append(CheckpointFile(path=where.display, existed_before=False))
                continue
            content, _ = files.read_bytes(where)
        except ToolFailure as failure:
            raise CheckpointFileError(failure.message) from None
        captured.append(CheckpointFile(path=where.display, existed_before=True, prior_content=content))
    return captured


def put_back(workspace: Path, files: Iterable[CheckpointFile]) -> None:
    """Rewrites prior bytes (creating parent directories) and deletes files that did not exist (already
    missing is fine). Writing absolute prior states makes this idempotent: repeating it after a crash
    midway ends in the same state. Every path is opened confined to the workspace, so a link planted
    after the snapshot cannot lead a restore out."""
    confined = Workspace(workspace)
    for file in files:
        try:
            if file.existed_before:
                confined.write_bytes(file.path, file.prior_content)
                continue
            status, where = confined.stat(file.path)
            if status is not None:
                confined.delete(where)
        except ToolFailure as failure:
            raise CheckpointFileError(failure.message) from None
