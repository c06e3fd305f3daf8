"""The server process makes itself non-dumpable at start-up, before any command runs (Linux only).

The kernel then refuses a process of the same user that lacks CAP_SYS_PTRACE access to this one's
/proc/<pid>/environ, mem and maps, and ptrace. A server that is not root runs `exec` commands as its own user
(tools/shell/command_user.py): this is what keeps them out of the environment the server started with (API keys
included; /proc shows that initial environment whatever os.environ holds later) and out of its memory. It also
means no core dump full of keys. A child gets its own, dumpable, state back when it execs its program."""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_DUMPABLE = 4


def harden_process() -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_DUMPABLE): {os.strerror(errno)}")
