"""A program run in a pseudo-terminal (the stdlib `pty`), as a person at a terminal would run it: the pty is its
controlling terminal, so Ctrl-C typed into it is a SIGINT and Ctrl-D at the start of a line ends its input."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Za-z0-9]|\r")


def _controlling_terminal() -> None:  # runs in the child, before exec
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtySession:
    def __init__(self, command: Sequence[str], env: Mapping[str, str], *, rows: int = 40, columns: int = 120) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.process = subprocess.Popen(
            list(command),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color"},
            preexec_fn=_controlling_terminal,  # the child makes the pty its controlling terminal
        )
        os.close(slave)
        self._master = master
        self.raw = ""
        self._seen = 0  # how much of `text` earlier waits consumed

    @property
    def text(self) -> str:
        """Everything the program printed, escape sequences and carriage returns removed."""
        return _ESCAPES.sub("", self.raw)

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self._master], [], [], timeout)
        if ready:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # the program exited and the pty closed
                chunk = b""
            if not chunk and self.process.poll() is not None:
                raise AssertionError(f"the program exited ({self.process.returncode}):\n{self.text}")
            self.raw += chunk.decode(errors="replace")

    def expect(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Waits until `pattern` (a regex) appears after what earlier waits matched; returns the match."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.compile(pattern).search(self.text, self._seen)
            if found is not None:
                self._seen = found.end()
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout:g}s in:\n{self.text[self._seen :]}")
            self._read(0.1)

    def send(self, data: str) -> None:
        os.write(self._master, data.encode())

    def wait(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(AssertionError):
                self._read(0.1)
        return self.process.wait(timeout=1)

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        with contextlib.suppress(OSError):
            os.close(self._master)
