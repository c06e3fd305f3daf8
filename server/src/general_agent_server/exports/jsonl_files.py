"""Append-only JSONL files, one per session (`<root>/<tenant>/<session_id>.jsonl`, mode 0600), written
after commit by one buffered background writer so the hot path never waits on file I/O, nor on encoding: the
lines a writer hands over are an iterable read on the writing thread (a generator over immutable records encodes
them there, not in the commit that produced them)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from general_agent_server.security.redaction import redact_text

logger = logging.getLogger(__name__)

COALESCE_SECONDS = 0.05

_Key = tuple[str, str]


class JsonlFiles:
    def __init__(self, root: Path, *, name: str) -> None:
        self._root = root
        self._name = name
        # Keyed by (tenant, session id): the path is built on the writing thread, not per appended turn.
        self._pending: dict[_Key, list[Iterable[str]]] = defaultdict(list)
        self._truncate: set[_Key] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Serialises file I/O: a delete must not race a write already handed to a thread (which would
        # re-create the file after the unlink).
        self._io_lock = asyncio.Lock()

    def path_for(self, tenant: str, session_id: str) -> Path:
        return self._root / tenant / f"{session_id}.jsonl"

    def start(self) -> None:
        self._task = asyncio.create_task(self._write_loop(), name=self._name)

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None

    def append_lines(self, tenant: str, session_id: str, lines: Iterable[str]) -> None:
        """Queues `lines`, read later on the writing thread: what they are made from must not change meanwhile."""
        self._pending[tenant, session_id].append(lines)
        self._wake.set()

    def truncate(self, tenant: str, session_id: str) -> None:
        self._pending.pop((tenant, session_id), None)
        self._truncate.add((tenant, session_id))
        self._wake.set()

    async def flush(self) -> None:
        await self._write_pending()

    async def delete(self, tenant: str, session_id: str) -> None:
        async with self._io_lock:
            self._pending.pop((tenant, session_id), None)
            self._truncate.discard((tenant, session_id))
            await asyncio.to_thread(self.path_for(tenant, session_id).unlink, missing_ok=True)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            # Gather a moment's lines into one write, off the hot path of the turn that produced them.
            if not self._closing:
                await asyncio.sleep(COALESCE_SECONDS)
            self._wake.clear()
            try:
                await self._write_pending()
            except OSError:
                logger.exception("%s failed", self._name, extra={"category": "system"})
            if self._closing:
                await self._write_pending()
                return

    async def _write_pending(self) -> None:
        async with self._io_lock:
            if not self._pending and not self._truncate:
                return
            pending, self._pending = dict(self._pending), defaultdict(list)
            truncate, self._truncate = set(self._truncate), set()
            await asyncio.to_thread(self._write_files, pending, truncate)

    def _write_files(self, pending: dict[_Key, list[Iterable[str]]], truncate: set[_Key]) -> None:
        for key in truncate:
            if key not in pending:
                _write_private(self.path_for(*key), b"", truncate=True)
        for key, lines in pending.items():
            _write_private(self.path_for(*key), _text(lines).encode(), truncate=key in truncate)


def _text(batches: list[Iterable[str]]) -> str:
    """The lines as written: every line a writer hands over (a turn's input included) is redacted here."""
    return "".join(redact_text(line) + "\n" for lines in batches for line in lines)


def _write_private(path: Path, data: bytes, *, truncate: bool) -> None:
    """Appends `data` to the file (or replaces its content), creating the file 0600 and its directory 0700 when
    missing. Raw descriptors: a batch's append is an open, a write and a close, without the text layer's terminal
    check and seek, or a directory check per file (the directory is made only when the open finds it missing)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else os.O_APPEND)
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def line_count(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 16), b""))
    except FileNotFoundError:
        return -1


def rewrite(path: Path, lines: list[str]) -> None:
    _write_private(path, _text([lines]).encode(), truncate=True)
