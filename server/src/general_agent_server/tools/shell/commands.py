"""Starting shell commands for `exec` and killing them: the shell, a filtered environment, an own process
group per command, and SIGKILL for the whole group."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from general_agent_server.tools.shell.command_user import CommandUser, hand_over

# How long to wait for a killed process to be reaped, and for its pipe to reach EOF.
KILL_WAIT_SECONDS = 5.0
CHUNK_BYTES = 64 * 1024


def allowed_names(setting: str) -> tuple[str, ...]:
    """The exec_env_allow setting as variable names; case matters for environment variables."""
    return tuple(dict.fromkeys(name.strip() for name in setting.split(",") if name.strip()))


def filtered_environment(names: tuple[str, ...], source: Mapping[str, str] | None = None) -> dict[str, str]:
    """Only the allowed variables: server secrets (API keys, tokens) must never reach a command."""
    environ = os.environ if source is None else source
    return {name: environ[name] for name in names if name in environ}


def shell_path(environ: Mapping[str, str] | None = None) -> str:
    """$SHELL when it exists, else /bin/bash, else bash or sh from PATH: the user's shell first, as a terminal would."""
    environ = os.environ if environ is None else environ
    configured = environ.get("SHELL", "")
    for candidate in (configured, "/bin/bash"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("bash") or shutil.which("sh") or "/bin/sh"


class ShellLauncher:
    """Spawns `<shell> -c <command>` in its own session (so its process group can be killed as one), as
    `user` when given (tools/shell/command_user.py says who and why)."""

    def __init__(self, env_allow: str, user: CommandUser | None = None) -> None:
        self._names = allowed_names(env_allow)
        self._user = user

    def environment(self, workspace: Path | None = None) -> dict[str, str]:
        # Read at every spawn, not at construction: the server's environment may change while it runs.
        environment = filtered_environment(self._names)
        if self._user is not None and workspace is not None:
            environment.update(self._user.environment(home=workspace))
        return environment

    async def spawn(
        self, command: str, cwd: Path, *, interactive: bool, workspace: Path | None = None
    ) -> asyncio.subprocess.Process:
        """interactive=True gives the command a stdin pipe (background processes take `process write`).
        `workspace` (cwd is in it) is handed to the command's user first; cheap once that is done."""
        argv = [shell_path(), "-c", command]
        if self._user is not None:
            argv = self._user.argv(argv)
            if workspace is not None:
                await asyncio.to_thread(hand_over, workspace, self._user)
        return await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=self.environment(workspace or cwd),
            stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_group(pid: int) -> bool:
    """SIGKILLs the process group led by pid (the command, its children and grandchildren). False when the
    group is already gone."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def pump(stream: asyncio.StreamReader, on_chunk: Callable[[bytes], None]) -> None:
    """Hands every chunk of a pipe to on_chunk until EOF; callers keep bounded buffers, never all output."""
    while chunk := await stream.read(CHUNK_BYTES):
        on_chunk(chunk)


async def shell_exited(process: asyncio.subprocess.Process) -> None:
    """Returns once the shell itself has exited. process.wait() also waits for the output pipe to close, which
    anything the command left running keeps open; a pidfd is readable as soon as the shell is gone."""
    if not hasattr(os, "pidfd_open"):
        # Not Linux: leftovers holding the pipe delay this until they exit (or the timeout kills them).
        await process.wait()
        return
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited = loop.create_future()

    def on_readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_readable)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


async def settle(process: asyncio.subprocess.Process, reader: asyncio.Task[None]) -> int | None:
    """Kills what is left of the command's process group (after a timeout or cancel: everything; after a normal
    exit: what it left running, orphans nobody tracks that would keep the pipe open and outlive the call), then
    collects the rest of the output and reaps the shell, bounded. Returns the shell's exit status."""
    kill_group(process.pid)
    try:
        async with asyncio.timeout(KILL_WAIT_SECONDS):
            await reader
            await process.wait()
    except TimeoutError:
        # Something outside the group (a command that called setsid) still holds the pipe.
        reader.cancel()
        await asyncio.wait({reader})
    return process.returncode
