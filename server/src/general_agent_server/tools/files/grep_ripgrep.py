"""grep's search by ripgrep, when it is installed (the `ripgrep` package puts `rg` next to the server's
Python). Same results as the in-process search (grep_python.py describes them); the flags below are what
makes ripgrep agree with it.

ripgrep runs in the searched directory through its descriptor (/proc/self/fd/N as working directory, the
descriptor passed to the child), so a link swapped in after the directory was opened cannot redirect it; it
never follows links below it (no --follow). Its JSON output keeps file names with ':' or line breaks intact."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sysconfig
from contextlib import suppress
from pathlib import Path
from typing import Any

from general_agent_server.tools.files.file_walk import SKIPPED_NAMES
from general_agent_server.tools.files.grep_python import GrepMatch, GrepQuery, GrepResult, invalid_regex
from general_agent_server.tools.runtime import ToolFailure

# The longest JSON line read from ripgrep: one matching line with its metadata.
MAX_EVENT_BYTES = 64 * 1024 * 1024


def find_ripgrep() -> str | None:
    """`rg` on PATH, else the one the `ripgrep` package installed beside this Python."""
    found = shutil.which("rg")
    if found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "rg"
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def can_run_in_descriptor() -> bool:
    """Whether a child process can be started in a directory given by descriptor (Linux /proc)."""
    return Path("/proc/self/fd").is_dir()


def ripgrep_arguments(ripgrep: str, query: GrepQuery) -> list[str]:
    arguments = [
        ripgrep,
        "--json",
        "--sort=path",  # a stable order, the in-process search's
        "--no-config",
        "--hidden",
        "--no-ignore",
        "--no-messages",  # unreadable files are skipped quietly, as in-process
        "--ignore-case" if query.case_insensitive else "--case-sensitive",
    ]
    if query.glob:
        arguments += ["--glob", query.glob]
    for name in sorted(SKIPPED_NAMES):
        arguments += ["--glob", f"!{name}"]
    return [*arguments, "--", query.pattern, "."]


async def search_with_ripgrep(ripgrep: str, base_fd: int, query: GrepQuery) -> GrepResult:
    process = await asyncio.create_subprocess_exec(
        *ripgrep_arguments(ripgrep, query),
        cwd=f"/proc/self/fd/{base_fd}",
        pass_fds=(base_fd,),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={},  # ripgrep needs nothing from the server's environment
        limit=MAX_EVENT_BYTES,
    )
    if process.stdout is None or process.stderr is None:
        raise RuntimeError("ripgrep started without pipes")
    errors = asyncio.ensure_future(process.stderr.read())
    matches: list[GrepMatch] = []
    truncated = False
    try:
        async for line in process.stdout:
            event = json.loads(line)
            if event.get("type") != "match":
                continue
            if len(matches) >= query.max_matches:
                truncated = True
                process.kill()  # enough: the rest is not needed
                break
            matches.append(_match(event["data"]))
        returncode = await process.wait()
    except BaseException as exc:
        with suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        await asyncio.wait([errors])
        if isinstance(exc, ValueError):  # a line over the read limit
            raise ToolFailure("A matching line is too long to show; narrow the pattern, path or glob") from None
        raise
    stderr = (await errors).decode("utf-8", errors="replace").strip()
    if not truncated and returncode == 2 and stderr:
        reason = stderr.splitlines()[-1].removeprefix("error: ")
        if "regex" in stderr:
            raise invalid_regex(query.pattern, reason)
        if "glob" in stderr:
            raise ToolFailure(f"Invalid glob {query.glob!r}: {stderr}")
        raise ToolFailure(f"grep failed: {stderr}")
    return GrepResult(matches=matches, truncated=truncated)


def _match(data: dict[str, Any]) -> GrepMatch:
    path = _text(data["path"]).removeprefix("./")
    text = _text(data["lines"]).removesuffix("\n").removesuffix("\r")
    return GrepMatch(path=path, line_number=int(data["line_number"]), text=text)


def _text(value: dict[str, str]) -> str:
    """ripgrep's {"text": ...} or, for bytes that are not UTF-8, {"bytes": base64}."""
    if "text" in value:
        return value["text"]
    return base64.b64decode(value["bytes"]).decode("utf-8", errors="replace")
