"""Parsing the `apply_patch` format (the Codex-style patch; docs/tools.md):

    *** Begin Patch
    *** Add File: path         then lines starting with "+"
    *** Delete File: path
    *** Update File: path      optionally "*** Move to: path", then chunks: "@@" or "@@ <context line>" (the
                               first chunk may omit it), lines starting with " " / "+" / "-", and optionally
                               "*** End of File" when the chunk must match at the end of the file
    *** End Patch

A `<<EOF` ... `EOF` wrapper around the whole patch is tolerated. Error messages say which line is wrong and
what was expected there."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"
ADD_FILE = "*** Add File: "
DELETE_FILE = "*** Delete File: "
UPDATE_FILE = "*** Update File: "
MOVE_TO = "*** Move to: "
END_OF_FILE = "*** End of File"
CHANGE_CONTEXT = "@@ "
EMPTY_CHANGE_CONTEXT = "@@"
_HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')


class PatchSyntaxError(ValueError):
    """The patch text is not in the format; the message says where and why."""


@dataclass(frozen=True, slots=True)
class AddFile:
    path: str
    contents: str


@dataclass(frozen=True, slots=True)
class DeleteFile:
    path: str


@dataclass(slots=True)
class UpdateChunk:
    change_context: str | None
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)
    is_end_of_file: bool = False


@dataclass(frozen=True, slots=True)
class UpdateFile:
    path: str
    move_path: str | None
    chunks: list[UpdateChunk]


Hunk = AddFile | DeleteFile | UpdateFile


def parse_patch(text: str) -> list[Hunk]:
    trimmed = text.strip()
    if not trimmed:
        raise PatchSyntaxError("Invalid patch: input is empty.")
    lines = _inside_boundaries(re.split(r"\r?\n", trimmed))
    hunks: list[Hunk] = []
    remaining = lines[1:-1]
    line_number = 2
    while remaining:
        hunk, consumed = _parse_hunk(remaining, line_number)
        hunks.append(hunk)
        line_number += consumed
        remaining = remaining[consumed:]
    return hunks


def _inside_boundaries(lines: list[str]) -> list[str]:
    """The lines from `*** Begin Patch` to `*** End Patch`, unwrapping a heredoc wrapper if there is one."""
    error = _boundary_error(lines)
    if error is None:
        return lines
    if len(lines) >= 4 and lines[0] in _HEREDOC_OPENERS and lines[-1].endswith("EOF"):
        inner = lines[1:-1]
        inner_error = _boundary_error(inner)
        if inner_error is None:
            return inner
        raise PatchSyntaxError(inner_error)
    raise PatchSyntaxError(error)


def _boundary_error(lines: list[str]) -> str | None:
    first = lines[0].strip() if lines else ""
    last = lines[-1].strip() if lines else ""
    if first == BEGIN_PATCH and last == END_PATCH:
        return None
    if first != BEGIN_PATCH:
        return f"The first line of the patch must be '{BEGIN_PATCH}'"
    return f"The last line of the patch must be '{END_PATCH}'"


def _parse_hunk(lines: list[str], line_number: int) -> tuple[Hunk, int]:
    first = lines[0].strip()
    if first.startswith(ADD_FILE):
        added: list[str] = []
        for line in lines[1:]:
            if not line.startswith("+"):
                break
            added.append(line[1:] + "\n")
        return AddFile(path=first[len(ADD_FILE) :], contents="".join(added)), 1 + len(added)
    if first.startswith(DELETE_FILE):
        return DeleteFile(path=first[len(DELETE_FILE) :]), 1
    if first.startswith(UPDATE_FILE):
        return _parse_update(lines, line_number, first[len(UPDATE_FILE) :])
    raise PatchSyntaxError(
        f"Invalid patch hunk at line {line_number}: '{lines[0]}' is not a valid hunk header. Valid hunk headers: "
        f"'{ADD_FILE}{{path}}', '{DELETE_FILE}{{path}}', '{UPDATE_FILE}{{path}}'"
    )


def _parse_update(lines: list[str], line_number: int, path: str) -> tuple[UpdateFile, int]:
    consumed = 1
    move_path = None
    if len(lines) > 1 and lines[1].strip().startswith(MOVE_TO):
        move_path = lines[1].strip()[len(MOVE_TO) :]
        consumed += 1
    chunks: list[UpdateChunk] = []
    while consumed < len(lines):
        line = lines[consumed]
        if not line.strip():
            consumed += 1  # blank lines between chunks
            continue
        if line.startswith("***"):
            break
        chunk, used = _parse_chunk(lines[consumed:], line_number + consumed, first=not chunks)
        chunks.append(chunk)
        consumed += used
    if not chunks:
        raise PatchSyntaxError(f"Invalid patch hunk at line {line_number}: Update file hunk for path '{path}' is empty")
    return UpdateFile(path=path, move_path=move_path, chunks=chunks), consumed


def _parse_chunk(lines: list[str], line_number: int, *, first: bool) -> tuple[UpdateChunk, int]:
    start = 0
    context: str | None = None
    if lines[0] == EMPTY_CHANGE_CONTEXT:
        start = 1
    elif lines[0].startswith(CHANGE_CONTEXT):
        context = lines[0][len(CHANGE_CONTEXT) :]
        start = 1
    elif not first:
        raise PatchSyntaxError(
            f"Invalid patch hunk at line {line_number}: Expected update hunk to start with a @@ context marker, "
            f"got: '{lines[0]}'"
        )
    if start >= len(lines):
        raise PatchSyntaxError(f"Invalid patch hunk at line {line_number + 1}: Update hunk does not contain any lines")
    chunk = UpdateChunk(change_context=context)
    parsed = 0
    for line in lines[start:]:
        if line == END_OF_FILE:
            if parsed == 0:
                raise PatchSyntaxError(
                    f"Invalid patch hunk at line {line_number + 1}: Update hunk does not contain any lines"
                )
            chunk.is_end_of_file = True
            parsed += 1
            break
        marker, content = line[:1], line[1:]
        if marker in ("", " "):
            # An empty line is an empty context line (editors strip the lone space).
            chunk.old_lines.append(content)
            chunk.new_lines.append(content)
        elif marker == "+":
            chunk.new_lines.append(content)
        elif marker == "-":
            chunk.old_lines.append(content)
        elif parsed == 0:
            raise PatchSyntaxError(
                f"Invalid patch hunk at line {line_number + 1}: Unexpected line found in update hunk: '{line}'. "
                "Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)"
            )
        else:
            break
        parsed += 1
    return chunk, parsed + start
