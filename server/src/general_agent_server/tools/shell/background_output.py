"""The output of a background process as the `process` tool reads it: what is new since the last poll, and
the log by lines. Both are bounded (a chatty server left running must not grow the service's memory)."""

from __future__ import annotations

import codecs
from collections import deque

from general_agent_server.tools.shell.output_text import sanitize

# Unread output: past the cap, only the newest tail is kept (the latest output matters most).
PENDING_CAP_CHARS = 100_000
PENDING_TAIL_CHARS = 50_000
# The log: the oldest lines go once it passes this size, so a chatty process cannot grow memory without end.
LOG_CAP_CHARS = 1_000_000


class ProcessOutput:
    def __init__(self, *, log_cap_chars: int = LOG_CAP_CHARS) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._pending_dropped = 0
        self._lines: deque[str] = deque()
        self._partial = ""
        self._log_chars = 0
        self._log_cap = log_cap_chars
        self.dropped_lines = 0

    def feed(self, chunk: bytes) -> None:
        self._add(sanitize(self._decoder.decode(chunk)))

    def close(self) -> None:
        self._add(sanitize(self._decoder.decode(b"", final=True)))

    def _add(self, text: str) -> None:
        if not text:
            return
        self._pending += text
        if len(self._pending) > PENDING_CAP_CHARS:
            self._pending_dropped += len(self._pending) - PENDING_TAIL_CHARS
            self._pending = self._pending[-PENDING_TAIL_CHARS:]
        *complete, self._partial = (self._partial + text).split("\n")
        for line in complete:
            self._lines.append(line)
            self._log_chars += len(line) + 1
        if len(self._partial) > self._log_cap:
            # A line that never ends (a progress bar without newlines): keep its newest part.
            self._partial = self._partial[-self._log_cap :]
        while self._log_chars > self._log_cap and self._lines:
            self._log_chars -= len(self._lines.popleft()) + 1
            self.dropped_lines += 1

    def take_pending(self) -> tuple[str, int]:
        """Output since the last call, and how many of its characters were dropped to stay bounded."""
        text, dropped = self._pending, self._pending_dropped
        self._pending, self._pending_dropped = "", 0
        return text, dropped

    def lines(self) -> list[str]:
        return [*self._lines, self._partial] if self._partial else list(self._lines)
