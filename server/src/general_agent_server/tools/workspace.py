"""Workspace confinement: every path a file tool touches resolves inside the session workspace, with
symbolic links resolved before the check so a link cannot lead out."""

from __future__ import annotations

import os
from pathlib import Path

from general_agent_server.core.tools import ToolFailure


def resolve_in_workspace(workspace: Path, raw_path: str) -> Path:
    if not raw_path or "\0" in raw_path:
        raise ToolFailure("path must be a non-empty string")
    root = workspace.resolve()
    candidate = Path(raw_path)
    # Absolute paths are accepted only when they already point inside the workspace.
    target = candidate if candidate.is_absolute() else root / candidate
    resolved = Path(os.path.realpath(target))
    if resolved != root and root not in resolved.parents:
        raise ToolFailure(f"path {raw_path!r} is outside the workspace")
    return resolved


def display_path(workspace: Path, path: Path) -> str:
    try:
        return str(path.relative_to(workspace.resolve()))
    except ValueError:
        return str(path)
