"""`exec`: a shell command in the session workspace, in its own process group, with a filtered environment, as
a user that cannot read the server (tools/shell/command_user.py); the output's tail and the exit code come back (a
non-zero exit is a normal result; timeout and cancel are errors). background=true hands the command to the
process registry and returns at once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from general_agent_server.tools.shell.background import Owner, ProcessRegistry
from general_agent_server.tools.shell.commands import ShellLauncher, pump, settle, shell_exited
from general_agent_server.tools.shell.output_text import MAX_BYTES, MAX_LINES, ByteTail, sanitize, tail_lines
from general_agent_server.workspace.workspace import resolve_in_workspace

# The runtime's own timeout around the call must not fire before exec's (which kills and reports output).
RUNTIME_TIMEOUT_MARGIN_SECONDS = 30.0
# Raw bytes kept while a command runs: more than is shown, since control sequences are stripped afterwards.
RAW_TAIL_BYTES = 4 * MAX_BYTES


def exec_spec(default_timeout: float, max_timeout: float) -> ToolSpec:
    return ToolSpec(
        name="exec",
        description=(
            "Run a shell command in the workspace (stdout and stderr merged). Returns the last "
            f"{MAX_LINES} lines / {MAX_BYTES // 1024} KB of output and the exit code when it is not 0. "
            f"Default timeout {default_timeout:g}s, at most {max_timeout:g}s; on timeout the command and "
            "everything it started are killed. Processes it leaves running are killed when it exits: use "
            "background=true for servers and other long-running commands, then the process tool."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1, "description": "Shell command to run."},
                "workdir": {
                    "type": "string",
                    "description": "Working directory, relative to the workspace (default: the workspace).",
                },
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": f"Seconds before the command is killed (default {default_timeout:g}, "
                    f"at most {max_timeout:g}).",
                },
                "background": {
                    "type": "boolean",
                    "description": "Start in the background and return at once; follow it with the process tool.",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        read_only=False,
        timeout_seconds=max_timeout + RUNTIME_TIMEOUT_MARGIN_SECONDS,
    )


@dataclass(frozen=True, slots=True)
class Completed:
    output: ByteTail
    exit_code: int | None  # None: timed out


async def run_command(
    launcher: ShellLauncher, command: str, cwd: Path, limit_seconds: float, workspace: Path | None = None
) -> Completed:
    """Runs to completion or timeout; on timeout, and on cancellation, the whole group is SIGKILLed and reaped
    before this returns (or re-raises)."""
    output = ByteTail(RAW_TAIL_BYTES)
    process = await launcher.spawn(command, cwd, interactive=False, workspace=workspace)
    assert process.stdout is not None
    reader = asyncio.create_task(pump(process.stdout, output.append))
    try:
        async with asyncio.timeout(limit_seconds):
            await shell_exited(process)
    except TimeoutError:
        await settle(process, reader)
        return Completed(output=output, exit_code=None)
    except asyncio.CancelledError:
        await settle(process, reader)
        raise
    exit_code = await settle(process, reader)
    # None only if the shell could not be reaped in time; report it like a shell reports a killed job.
    return Completed(output=output, exit_code=-1 if exit_code is None else exit_code)


def render_output(output: ByteTail) -> tuple[str, bool]:
    """The text the model sees (tail, with the truncation notice) and whether anything was cut."""
    tail = tail_lines(sanitize(output.text()).rstrip("\n"))
    truncated = output.truncated or tail.truncated
    text = tail.text
    if truncated:
        text += f"\n[Output truncated: showing last {tail.lines} lines]"
    return text, truncated


def resolve_workdir(context: ToolContext, workdir: str | None) -> Path:
    context.workspace.mkdir(parents=True, exist_ok=True)
    if workdir is None:
        return context.workspace
    path = resolve_in_workspace(context.workspace, workdir)
    if not path.is_dir():
        raise ToolFailure(f"Working directory does not exist: {workdir}")
    return path


class ExecTool:
    """Also the lifecycle owner of the background processes it starts (see tools/runtime.py ToolLifecycle)."""

    def __init__(
        self, *, launcher: ShellLauncher, registry: ProcessRegistry, default_timeout: float, max_timeout: float
    ) -> None:
        self._launcher = launcher
        self._registry = registry
        self._default_timeout = default_timeout
        self._max_timeout = max_timeout
        self.spec = exec_spec(default_timeout, max_timeout)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        command = str(arguments["command"])
        if not command.strip():
            raise ToolFailure("command must not be empty")
        cwd = resolve_workdir(context, arguments.get("workdir"))
        if arguments.get("background"):
            return await self._start_background(command, cwd, context)
        timeout = min(float(arguments.get("timeout", self._default_timeout)), self._max_timeout)
        completed = await run_command(self._launcher, command, cwd, timeout, context.workspace)
        text, truncated = render_output(completed.output)
        if completed.exit_code is None:
            message = f"Command timed out after {timeout:g}s" + (f"\n{text}" if text else "")
            raise ToolFailure(message, {"timed_out": True, "timeout_seconds": timeout, "truncated": truncated})
        text = text or "(no output)"
        if completed.exit_code != 0:
            text += f"\n[Exit code: {completed.exit_code}]"
        return ToolOutcome.text(text, {"exit_code": completed.exit_code, "truncated": truncated})

    async def _start_background(self, command: str, cwd: Path, context: ToolContext) -> ToolOutcome:
        owner = Owner(tenant=context.tenant, session_id=context.session_id, run_id=context.run_id)
        entry = await self._registry.start(command, cwd, owner, workspace=context.workspace)
        text = (
            f"Background session started: {entry.id}\nCommand: {command}\nPID: {entry.pid}\n"
            "Use the process tool to check status."
        )
        return ToolOutcome.text(text, {"session_id": entry.id, "pid": entry.pid})

    async def run_cancelled(self, tenant: str, session_id: str, run_id: str) -> None:
        await self._registry.kill_run(tenant, session_id, run_id)

    async def session_closed(self, tenant: str, session_id: str) -> None:
        await self._registry.close_session(tenant, session_id)

    async def aclose(self) -> None:
        await self._registry.aclose()
