"""The diff `edit` shows the model: changed lines with their line numbers and a few lines of context
(`-12 old`, `+12 new`, ` 13 context`, and `...` where unchanged lines are left out)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

CONTEXT_LINES = 4


@dataclass(frozen=True, slots=True)
class LineDiff:
    text: str
    first_changed_line: int | None  # 1-based, in the new text


def numbered_diff(old: str, new: str, context: int = CONTEXT_LINES) -> LineDiff:
    old_lines, new_lines = _lines(old), _lines(new)
    width = len(str(max(len(old_lines), len(new_lines), 1)))
    skipped = f" {'':>{width}} ..."
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    out: list[str] = []
    first_changed: int | None = None
    shown_until = 0  # old lines before this index were shown or skipped
    for group in matcher.get_grouped_opcodes(context):
        if group[0][1] > shown_until:
            out.append(skipped)
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(f" {number + 1:>{width}} {old_lines[number]}" for number in range(i1, i2))
                continue
            if first_changed is None:
                first_changed = j1 + 1
            out.extend(f"-{number + 1:>{width}} {old_lines[number]}" for number in range(i1, i2))
            out.extend(f"+{number + 1:>{width}} {new_lines[number]}" for number in range(j1, j2))
        shown_until = group[-1][2]
    if out and shown_until < len(old_lines):
        out.append(skipped)
    return LineDiff(text="\n".join(out), first_changed_line=first_changed)


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # the final line break ends the last line; it does not start another
    return lines
