"""The workspace side of file checkpoints: capture what files held before a mutation, and put it back.

Paths are kept workspace-relative, and every write or delete re-resolves them inside the workspace, with
symbolic links followed before the check, so a link planted after the snapshot cannot lead a restore out."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


class CheckpointFileError(Exception):
    """A file could not be captured or put back; the message names it workspace-relative (never the server's
    absolute layout)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointFile:
    """One file's state before a mutation: its prior bytes, or that it did not exist."""

    path: str  # workspace-relative display path
    existed_before: bool
    prior_content: bytes = b""


def inside_workspace(root: Path, path: Path) -> Path:
    """`path` (absolute, or relative to `root`) resolved; raises unless it lies strictly inside `root`."""
    resolved = Path(os.path.realpath(root / path))
    if root not in resolved.parents:
        raise CheckpointFileError(f"{path} is outside the workspace")
    return resolved


def snapshot(workspace: Path, paths: Sequence[Path]) -> list[CheckpointFile]:
    """The prior state of each distinct file among `paths`. Directories are skipped: no file tool writes
    bytes into one, so there is nothing to put back."""
    root = workspace.resolve()
    files: list[CheckpointFile] = []
    seen: set[Path] = set()
    for path in paths:
        resolved = inside_workspace(root, path)
        if resolved in seen or resolved.is_dir():
            continue
        seen.add(resolved)
        display = str(resolved.relative_to(root))
        if not resolved.is_file():
            files.append(CheckpointFile(path=display, existed_before=False))
            continue
        try:
            content = resolved.read_bytes()
        except OSError as exc:
            raise CheckpointFileError(f"{display}: cannot read: {exc.strerror or exc}") from exc
        files.append(CheckpointFile(path=display, existed_before=True, prior_content=content))
    return files


def put_back(workspace: Path, files: Iterable[CheckpointFile]) -> None:
    """Rewrites prior bytes (creating parent directories) and deletes files that did not exist (already
    missing is fine). Writing absolute prior states makes this idempotent: repeating it after a crash
    midway ends in the same state."""
    root = workspace.resolve()
    for file in files:
        target = inside_workspace(root, Path(file.path))
        try:
            if file.existed_before:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(file.prior_content)
            else:
                target.unlink(missing_ok=True)
        except NotADirectoryError:
            # Deleting: a parent is no longer a directory, so the file cannot exist either.
            if file.existed_before:
                raise CheckpointFileError(f"{file.path}: a parent is not a directory") from None
        except OSError as exc:
            raise CheckpointFileError(f"{file.path}: {exc.strerror or exc}") from exc
