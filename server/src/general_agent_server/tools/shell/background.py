"""Background processes started by `exec background=true`, kept per (tenant, session): a session sees only its
own. The registry kills them when the run that started them is cancelled, when their session goes away, and at
server shutdown."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.tools.shell.background_output import ProcessOutput
from general_agent_server.tools.shell.commands import (
    KILL_WAIT_SECONDS,
    ShellLauncher,
    kill_group,
    pump,
    settle,
    shell_exited,
)

# Entries (running or exited) one session may hold; exited ones stay until `process remove`.
MAX_PROCESSES_PER_SESSION = 32
# How long `process write` may wait for a process that does not read its stdin.
STDIN_WRITE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Owner:
    tenant: str
    session_id: str
    run_id: str


class BackgroundProcess:
    def __init__(self, *, process_id: str, command: str, owner: Owner, process: asyncio.subprocess.Process) -> None:
        self.id = process_id
        self.command = command
        self.owner = owner
        self.started_at = datetime.now(UTC)
        self.output = ProcessOutput()
        self.exit_code: int | None = None
        self._process = process
        self._watcher = asyncio.create_task(self._watch(), name=f"background-process-{process_id}")

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def running(self) -> bool:
        return self.exit_code is None

    async def _watch(self) -> None:
        assert self._process.stdout is not None
        reader = asyncio.create_task(pump(self._process.stdout, self.output.feed))
        try:
            await shell_exited(self._process)
            code = await settle(self._process, reader)
            self.exit_code = -1 if code is None else code
        except asyncio.CancelledError:
            await settle(self._process, reader)
            raise
        finally:
            self.output.close()
            if self._process.stdin is not None:
                self._process.stdin.close()

    async def kill(self) -> bool:
        """SIGKILLs the process group and waits until it is reaped; False when it had already exited."""
        if not self.running:
            return False
        kill_group(self.pid)
        await asyncio.wait({self._watcher}, timeout=KILL_WAIT_SECONDS)
        return True

    async def close(self) -> None:
        """Kills if needed and stops watching (the registry forgets the process afterwards)."""
        await self.kill()
        if not self._watcher.done():
            self._watcher.cancel()
        await asyncio.wait({self._watcher})

    async def write(self, data: str) -> None:
        stdin = self._process.stdin
        if not self.running or stdin is None or stdin.is_closing():
            raise ToolFailure(f"Session {self.id} has already exited; cannot write to stdin.")
        try:
            stdin.write(data.encode())
            async with asyncio.timeout(STDIN_WRITE_SECONDS):
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ToolFailure(f"Session {self.id} closed its stdin.") from exc
        except TimeoutError as exc:
            raise ToolFailure(f"Session {self.id} is not reading its stdin.") from exc

    def summary(self) -> dict[str, Any]:
        """One entry of `process list`: camelCase keys like the tool's arguments, the command cut to 80 characters."""
        return {
            "id": self.id,
            "command": self.command[:80],
            "pid": self.pid,
            "running": self.running,
            "exitCode": self.exit_code,
            "startedAt": self.started_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }


SessionKey = tuple[str, str]


class ProcessRegistry:
    def __init__(self, launcher: ShellLauncher, *, max_per_session: int = MAX_PROCESSES_PER_SESSION) -> None:
        self._launcher = launcher
        self._max_per_session = max_per_session
        self._sessions: dict[SessionKey, dict[str, BackgroundProcess]] = {}

    async def start(self, command: str, cwd: Path, owner: Owner, *, workspace: Path | None = None) -> BackgroundProcess:
        entries = self._sessions.setdefault((owner.tenant, owner.session_id), {})
        if len(entries) >= self._max_per_session:
            raise ToolFailure(
                f"This session already has {len(entries)} background processes; "
                "remove finished ones with the process tool (action=remove)."
            )
        process = await self._launcher.spawn(command, cwd, interactive=True, workspace=workspace)
        entry = BackgroundProcess(process_id=secrets.token_hex(6), command=command, owner=owner, process=process)
        entries[entry.id] = entry
        return entry

    def list(self, tenant: str, session_id: str) -> list[BackgroundProcess]:
        return list(self._sessions.get((tenant, session_id), {}).values())

    def get(self, tenant: str, session_id: str, process_id: str) -> BackgroundProcess:
        """Another session's id is simply unknown here: no hint that it exists."""
        entry = self._sessions.get((tenant, session_id), {}).get(process_id)
        if entry is None:
            raise ToolFailure(f"No session found for {process_id}")
        return entry

    async def remove(self, tenant: str, session_id: str, process_id: str) -> None:
        entry = self.get(tenant, session_id, process_id)
        await entry.close()
        self._sessions[(tenant, session_id)].pop(process_id, None)

    async def kill_run(self, tenant: str, session_id: str, run_id: str) -> None:
        """Kills what a cancelled run started; the entries stay so the session can still read their output."""
        for entry in self.list(tenant, session_id):
            if entry.owner.run_id == run_id:
                await entry.kill()

    async def close_session(self, tenant: str, session_id: str) -> None:
        entries = self._sessions.pop((tenant, session_id), {})
        await _close_all(entries.values())

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        await _close_all(entry for entries in sessions.values() for entry in entries.values())


async def _close_all(entries: Iterable[BackgroundProcess]) -> None:
    # Kill every group first (no waiting in between), then wait for all of them together.
    closing = list(entries)
    for entry in closing:
        if entry.running:
            kill_group(entry.pid)
    await asyncio.gather(*(entry.close() for entry in closing))
