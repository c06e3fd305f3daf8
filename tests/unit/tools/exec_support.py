"""Shared pieces of the exec/process unit tests: tools wired like the catalog does, contexts for sessions,
and process liveness checks that wait for a condition (bounded) instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from general_agent_server.config import ServerSettings
from general_agent_server.domain.content import TextPart
from general_agent_server.tools.runtime import ToolContext, ToolOutcome
from general_agent_server.tools.shell.background import ProcessRegistry
from general_agent_server.tools.shell.commands import ShellLauncher
from general_agent_server.tools.shell.exec import ExecTool
from general_agent_server.tools.shell.process_tool import ProcessTool

DEFAULT_ENV_ALLOW = ServerSettings().exec_env_allow


@dataclass
class Tools:
    exec: ExecTool
    process: ProcessTool
    registry: ProcessRegistry


def make_tools(
    *, default_timeout: float = 30.0, max_timeout: float = 60.0, env_allow: str = DEFAULT_ENV_ALLOW
) -> Tools:
    launcher = ShellLauncher(env_allow)
    registry = ProcessRegistry(launcher)
    tool = ExecTool(launcher=launcher, registry=registry, default_timeout=default_timeout, max_timeout=max_timeout)
    return Tools(exec=tool, process=ProcessTool(registry), registry=registry)


def context(workspace: Path, *, session: str = "s1", tenant: str = "default", run: str = "run-1") -> ToolContext:
    return ToolContext(tenant=tenant, session_id=session, run_id=run, call_id="call-1", workspace=workspace)


def text(outcome: ToolOutcome) -> str:
    return "".join(part.text for part in outcome.content if isinstance(part, TextPart))


def pid_alive(pid: int) -> bool:
    """A zombie counts as dead: killed orphans are re-parented to PID 1, which may be slow to reap them."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


async def read_pid(path: Path) -> int:
    """Waits for a command to write its pid file (bounded), then returns the pid."""
    await wait_until(lambda: path.exists() and path.read_text().strip().isdigit())
    return int(path.read_text().strip())
