"""Command output as text for the model: terminal control sequences stripped, and bounded tails (the last
lines of what a command printed matter most: errors and summaries come at the end)."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINES = 2000
MAX_BYTES = 50 * 1024

# ANSI escape sequences (CSI, OSC, charset selection, two-character escapes), then every control character
# except \n and \t.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+][0-9A-Za-z]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """Removes what would garble the model's view: colour codes, cursor moves, carriage returns, bells."""
    return _CONTROL.sub("", _ESCAPES.sub("", text.replace("\r\n", "\n")))


class ByteTail:
    """Keeps the last `limit` bytes written to it, so reading a noisy command costs bounded memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self.dropped = 0

    def append(self, chunk: bytes) -> None:
        self._data += chunk
        # Trim only when twice over the limit: amortised cost stays linear in the output.
        if len(self._data) > 2 * self._limit:
            excess = len(self._data) - self._limit
            del self._data[:excess]
            self.dropped += excess

    @property
    def held_bytes(self) -> int:
        """Bytes kept in memory now: at most twice the limit, however much was appended."""
        return len(self._data)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0 or len(self._data) > self._limit

    def text(self) -> str:
        data = bytes(self._data[-self._limit :])
        if self.truncated and b"\n" in data:
            # The first kept line was cut somewhere in the middle; a partial line only misleads.
            data = data[data.index(b"\n") + 1 :]
        return data.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Tail:
    text: str
    lines: int
    truncated: bool


def tail_lines(text: str, *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> Tail:
    """The last lines of text within both limits; a single last line longer than max_bytes keeps its end."""
    lines = text.split("\n")
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        cost = len(line.encode()) + (1 if kept else 0)
        if len(kept) == max_lines or size + cost > max_bytes:
            break
        kept.append(line)
        size += cost
    if not kept:
        # One enormous last line: keep its end rather than nothing.
        end = lines[-1].encode()[-max_bytes:].decode("utf-8", errors="ignore")
        return Tail(text=end, lines=1, truncated=True)
    kept.reverse()
    return Tail(text="\n".join(kept), lines=len(kept), truncated=len(kept) < len(lines))
