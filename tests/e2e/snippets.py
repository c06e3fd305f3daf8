"""The fenced snippets of README.md and docs/*.md, and how a snippet program runs against a live server (shared by
test_readme_snippets.py, which runs every snippet, and snippet_tasks.py, which runs the per-capability pages).

The snippets talk to 127.0.0.1:50051, the address `make run` listens on. The servers here listen on a free port
instead (a fixed port would collide with a developer's own `make run` and with parallel test runs), so that one
string, and nothing else, is replaced with the server's address before a snippet runs.

A page may mark its snippets with `<!-- snippet-task: NAME -->` on a line of its own: every snippet after it
(up to the next marker) does the task NAME of snippet_tasks.py, whatever its language, and prints the same."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from general_agent.testing import FakeAnthropicThread
from tests.e2e.conftest import GO_CLIENT_DIR, REPO, TS_CLIENT_DIR, TSX, describe_run
from tests.support.subprocess_server import ServerProcess, ServerProcesses

MAKE_RUN_ADDRESS = "127.0.0.1:50051"
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w+-]*)[ \t]*$")
TASK_MARKER = re.compile(r"^<!-- snippet-task: (?P<task>[\w-]+) -->$")
PROGRAM_TIMEOUT = 90


@dataclass(frozen=True)
class Snippet:
    document: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    task: str | None = None  # the snippet-task marker above it, if any

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}:{self.language or 'plain'}"

    def against(self, address: str) -> str:
        """The code, talking to `address` instead of `make run`'s."""
        return self.code.replace(MAKE_RUN_ADDRESS, address)


def snippets(document: Path) -> list[Snippet]:
    """The fenced blocks of a Markdown file, each dedented by its fence's indentation (blocks in list items)."""
    found: list[Snippet] = []
    opening: tuple[int, re.Match[str]] | None = None
    body: list[str] = []
    task: str | None = None
    for number, line in enumerate(document.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if opening is None:
            if fence is not None:
                opening, body = (number, fence), []
            elif marker := TASK_MARKER.match(line):
                task = marker["task"]
        elif fence is not None and fence["indent"] == opening[1]["indent"] and not fence["language"]:
            code = textwrap.dedent("\n".join(body)) + "\n"
            found.append(Snippet(document, opening[0], opening[1]["language"], code, task))
            opening = None
        else:
            body.append(line)
    assert opening is None, f"{document}:{opening[0]}: a fence is never closed"
    return found


ALL_SNIPPETS = [snippet for document in DOCUMENTS for snippet in snippets(document)]


@dataclass
class Servers:
    fake: FakeAnthropicThread
    root: Path
    processes: ServerProcesses

    def start(self, *, extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> ServerProcess:
        server = self.processes.make(extra=env, extra_args=extra_args)
        server.start()
        return server


def client_env() -> dict[str, str]:
    """The snippet's environment: the test's, without anything that points at a real model or server."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("GENERAL_AGENT_", "ANTHROPIC_"))}


def run(command: list[str], *, cwd: Path, server: ServerProcess | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, cwd=cwd, env=client_env(), capture_output=True, text=True, timeout=PROGRAM_TIMEOUT, check=False
    )
    assert result.returncode == 0, describe_run(result, server)
    return result


@dataclass(frozen=True)
class Program:
    command: list[str]
    cwd: Path


@contextmanager
def program(snippet: Snippet, address: str, root: Path) -> Iterator[Program]:
    """The command that runs a python, go or ts snippet program against `address`, where a reader runs it: Python
    from the repository, Go inside the clients/go module (beside examples/), TypeScript inside clients/ts."""
    code = snippet.against(address)
    if snippet.language == "python":
        path = root / "snippet.py"
        path.write_text(code)
        yield Program([sys.executable, str(path)], REPO)
        return
    client_dir, file_name = {"go": (GO_CLIENT_DIR, "main.go"), "ts": (TS_CLIENT_DIR, "main.ts")}[snippet.language]
    scratch = Path(tempfile.mkdtemp(prefix="_snippet-", dir=client_dir))  # `_`: never matched by ./...
    try:
        (scratch / file_name).write_text(code)
        if snippet.language == "ts":
            yield Program([str(TSX), f"./{scratch.name}/{file_name}"], client_dir)
        else:  # built, then run: a signal reaches the program itself (`go run` would not pass SIGTERM on)
            run(["go", "build", "-o", str(scratch / "main"), f"./{scratch.name}"], cwd=client_dir)
            yield Program([str(scratch / "main")], client_dir)
    finally:
        shutil.rmtree(scratch)
