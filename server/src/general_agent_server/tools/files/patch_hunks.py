"""Applying the chunks of an `*** Update File` hunk to a file's text (LF line endings). Each chunk's old lines
are looked for from where the previous chunk ended, trying exact lines, then lines without trailing
whitespace, then trimmed lines, then trimmed lines with Unicode punctuation as ASCII: what models get wrong
when they retype lines."""

from __future__ import annotations

from collections.abc import Callable

from general_agent_server.tools.files.patch_format import UpdateChunk
from general_agent_server.tools.files.text_match import normalise_punctuation
from general_agent_server.tools.runtime import ToolFailure

# From strictest to most tolerant: the first comparison that finds the lines wins.
_LINE_COMPARISONS: tuple[Callable[[str], str], ...] = (
    lambda line: line,
    str.rstrip,
    str.strip,
    lambda line: normalise_punctuation(line.strip()),
)


def apply_chunks(text: str, chunks: list[UpdateChunk], shown: str) -> str:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line break ends the last line
    replacements = _replacements(lines, chunks, shown)
    # Back to front so earlier indexes stay valid; of two insertions at one index, the later chunk goes first
    # and so ends up after the earlier one.
    order = sorted(range(len(replacements)), key=lambda index: (replacements[index][0], index), reverse=True)
    for index in order:
        start, old_count, new_lines = replacements[index]
        lines[start : start + old_count] = new_lines
    return "\n".join(lines) + "\n"


def _replacements(lines: list[str], chunks: list[UpdateChunk], shown: str) -> list[tuple[int, int, list[str]]]:
    replacements: list[tuple[int, int, list[str]]] = []
    position = 0
    for chunk in chunks:
        if chunk.change_context:
            found = _seek(lines, [chunk.change_context], position, at_end=False)
            if found is None:
                raise ToolFailure(f"Failed to find context '{chunk.change_context}' in {shown}")
            position = found + 1
        if not chunk.old_lines:
            # Pure addition: at the end of the file (before a final blank line).
            at = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
            replacements.append((at, 0, chunk.new_lines))
            continue
        pattern, new_lines = chunk.old_lines, chunk.new_lines
        found = _seek(lines, pattern, position, at_end=chunk.is_end_of_file)
        if found is None and pattern[-1] == "":
            # A trailing empty context line is often an artifact of the patch's own layout: retry without it.
            pattern = pattern[:-1]
            if new_lines and new_lines[-1] == "":
                new_lines = new_lines[:-1]
            found = _seek(lines, pattern, position, at_end=chunk.is_end_of_file)
        if found is None:
            expected = "\n".join(chunk.old_lines)
            raise ToolFailure(f"Failed to find expected lines in {shown}:\n{expected}")
        replacements.append((found, len(pattern), new_lines))
        position = found + len(pattern)
    return replacements


def _seek(lines: list[str], pattern: list[str], start: int, *, at_end: bool) -> int | None:
    """The first index at or after `start` where `pattern` occurs (only the last possible index when `at_end`)."""
    if not pattern:
        return start
    last_start = len(lines) - len(pattern)
    if last_start < 0:
        return None
    first = last_start if at_end else start
    for compare in _LINE_COMPARISONS:
        wanted = [compare(line) for line in pattern]
        for index in range(first, last_start + 1):
            if all(compare(lines[index + offset]) == want for offset, want in enumerate(wanted)):
                return index
    return None
