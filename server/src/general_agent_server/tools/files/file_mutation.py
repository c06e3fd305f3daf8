"""What the mutating file tools (write, edit, apply_patch) share: one lock per file, so calls running at the
same time (several tool calls of one message) never interleave a read-modify-write of the same file, a way to
run blocking file I/O that is never abandoned half-way, and `LockedFileTool`, the base that joins the two."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from general_agent_server.tools.runtime import ToolContext, ToolFailure
from general_agent_server.workspace.workspace import Workspace

T = TypeVar("T")


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class PathLocks:
    """Locks keyed by resolved absolute path; an entry lives only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._entries: dict[Path, _Entry] = {}

    @asynccontextmanager
    async def hold(self, paths: Iterable[Path]) -> AsyncIterator[None]:
        # One global order (sorted) so two calls locking overlapping sets cannot deadlock.
        ordered = sorted(set(paths))
        entries = [self._entries.setdefault(path, _Entry()) for path in ordered]
        for entry in entries:
            entry.users += 1
        acquired: list[_Entry] = []
        try:
            for entry in entries:
                await entry.lock.acquire()
                acquired.append(entry)
            yield
        finally:
            for entry in reversed(acquired):
                entry.lock.release()
            for path, entry in zip(ordered, entries, strict=True):
                entry.users -= 1
                if entry.users == 0:
                    del self._entries[path]

    def __len__(self) -> int:
        return len(self._entries)


async def run_to_completion(function: Callable[[], T]) -> T:
    """Runs blocking file I/O in a thread. A thread cannot be interrupted, so when the call is cancelled (stop,
    timeout) this still waits for the thread before letting the cancellation through: the lock held around it
    and the checkpoint rollback that follows must not race a write still in progress."""
    task = asyncio.ensure_future(asyncio.to_thread(function))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the caller is cancelled, so nobody else will look at it
        raise


def path_argument(arguments: dict[str, Any]) -> str:
    """The `path` argument of a file tool (the checkpoint seam may look before schema validation)."""
    raw = arguments.get("path")
    if not isinstance(raw, str) or not raw.strip():
        raise ToolFailure("path must be a non-empty string")
    return raw


class LockedFileTool:
    """The base of the mutating file tools: the files a call touches (by default its one `path` argument; a tool
    that touches others overrides `touched_paths`) are locked while its change runs to completion."""

    def __init__(self, locks: PathLocks | None = None) -> None:
        self._locks = locks or PathLocks()

    def touched_paths(self, arguments: dict[str, Any], context: ToolContext) -> list[Path]:
        return [Workspace(context.workspace).resolve(path_argument(arguments)).absolute]

    async def _locked(self, arguments: dict[str, Any], context: ToolContext, change: Callable[[], T]) -> T:
        async with self._locks.hold(self.touched_paths(arguments, context)):
            return await run_to_completion(change)
