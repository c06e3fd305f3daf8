"""`process`: the background processes of this session (started by `exec background=true`): list them, poll new
output, read the log, write to stdin, kill, remove (docs/tools.md); failures are tool errors."""

from __future__ import annotations

import json
from typing import Any

from general_agent_server.tools.runtime import ToolContext, ToolFailure, ToolOutcome, ToolSpec
from general_agent_server.tools.shell.background import BackgroundProcess, ProcessRegistry

DEFAULT_LOG_LIMIT = 2000
ACTIONS = ("list", "poll", "log", "write", "kill", "remove")

SPEC = ToolSpec(
    name="process",
    description=(
        "Manage background commands started with exec background=true. Actions: list (all of this session's), "
        "poll (status and output since the last poll), log (output lines; offset/limit), write (send data to "
        "stdin), kill (SIGKILL the command and everything it started), remove (kill if running and forget)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS), "description": "What to do."},
            "sessionId": {
                "type": "string",
                "description": "The id exec returned (all actions but list).",
            },
            "data": {"type": "string", "description": "Text to write to stdin (write)."},
            "offset": {"type": "integer", "minimum": 0, "description": "First log line, 0-based (log)."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Log lines to return (log; default {DEFAULT_LOG_LIMIT}).",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    },
    read_only=False,
)


def _status(entry: BackgroundProcess) -> str:
    return "[running]" if entry.running else f"[exited: {entry.exit_code}]"


def _poll(entry: BackgroundProcess) -> ToolOutcome:
    text, dropped = entry.output.take_pending()
    body = text or "(no new output)"
    if dropped:
        body = f"[{dropped} earlier characters were dropped]\n{body}"
    details = {"running": entry.running, "exit_code": entry.exit_code}
    return ToolOutcome.text(f"{_status(entry)}\n{body}", details)


def _log(entry: BackgroundProcess, offset: int, limit: int) -> ToolOutcome:
    lines = entry.output.lines()
    if offset and offset >= len(lines):
        raise ToolFailure(f"offset {offset} is beyond the end of the log ({len(lines)} lines)")
    window = lines[offset : offset + limit]
    text = f"[Lines {offset + 1}-{offset + len(window)} of {len(lines)}]\n" + "\n".join(window)
    if not lines:
        text = "(no output)"
    if entry.output.dropped_lines:
        text += f"\n[Log capped: its first {entry.output.dropped_lines} lines are no longer kept]"
    return ToolOutcome.text(text, {"total_lines": len(lines), "dropped_lines": entry.output.dropped_lines})


class ProcessTool:
    spec = SPEC

    def __init__(self, registry: ProcessRegistry) -> None:
        self._registry = registry

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        action = str(arguments["action"])
        if action == "list":
            return self._list(context)
        if action not in ACTIONS:
            raise ToolFailure(f"Unknown action: {action}")
        process_id = arguments.get("sessionId")
        if not process_id:
            raise ToolFailure(f"sessionId is required for action {action}")
        entry = self._registry.get(context.tenant, context.session_id, str(process_id))
        if action == "poll":
            return _poll(entry)
        if action == "log":
            return _log(entry, int(arguments.get("offset", 0)), int(arguments.get("limit", DEFAULT_LOG_LIMIT)))
        if action == "write":
            return await self._write(entry, arguments.get("data"))
        if action == "kill":
            return await self._kill(entry)
        await self._registry.remove(context.tenant, context.session_id, entry.id)
        return ToolOutcome.text(f"Session {entry.id} removed.")

    def _list(self, context: ToolContext) -> ToolOutcome:
        entries = self._registry.list(context.tenant, context.session_id)
        if not entries:
            return ToolOutcome.text("No active sessions.", {"sessions": []})
        summaries = [entry.summary() for entry in entries]
        return ToolOutcome.text(json.dumps(summaries, indent=2), {"sessions": summaries})

    @staticmethod
    async def _write(entry: BackgroundProcess, data: Any) -> ToolOutcome:
        if not data:
            raise ToolFailure("data is required for action write")
        await entry.write(str(data))
        return ToolOutcome.text("Data written to stdin.")

    @staticmethod
    async def _kill(entry: BackgroundProcess) -> ToolOutcome:
        if not await entry.kill():
            return ToolOutcome.text("Session already exited.", {"exit_code": entry.exit_code})
        return ToolOutcome.text(f"Sent SIGKILL to process tree (PID: {entry.pid})", {"exit_code": entry.exit_code})
