"""The server's built-in tools, built from the server settings, in the order the model is offered them."""

from __future__ import annotations

import logging
from pathlib import Path

from general_agent_server.config import ServerSettings
from general_agent_server.tools.files.apply_patch import ApplyPatchTool
from general_agent_server.tools.files.edit import EditTool
from general_agent_server.tools.files.file_mutation import PathLocks
from general_agent_server.tools.files.glob import GlobTool
from general_agent_server.tools.files.grep import GrepTool
from general_agent_server.tools.files.grep_ripgrep import find_ripgrep
from general_agent_server.tools.files.read import ReadTool
from general_agent_server.tools.files.write import WriteTool
from general_agent_server.tools.runtime import LocalTool, ToolCatalog
from general_agent_server.tools.shell.background import ProcessRegistry
from general_agent_server.tools.shell.command_user import CommandUser, command_user, unreachable_from
from general_agent_server.tools.shell.commands import ShellLauncher
from general_agent_server.tools.shell.exec import ExecTool
from general_agent_server.tools.shell.process_tool import ProcessTool
from general_agent_server.tools.web.fetch import WebFetchTool
from general_agent_server.tools.web.search import WebSearchTool

logger = logging.getLogger(__name__)

# The order tools are offered in (docs/tools.md): files, then shell, then web, then subagents.
BUILTIN_NAMES = (
    "read",
    "write",
    "edit",
    "apply_patch",
    "glob",
    "grep",
    "exec",
    "process",
    "web_fetch",
    "web_search",
    "subagents",
)


def builtin_catalog(settings: ServerSettings) -> ToolCatalog:
    tools: dict[str, LocalTool] = {"read": ReadTool()}
    # Each tool module adds its entry here (keep BUILTIN_NAMES order; missing names are simply not offered).
    # One set of file locks for the three mutating tools, so their calls on one file never interleave.
    file_locks = PathLocks()
    tools["write"] = WriteTool(file_locks)
    tools["edit"] = EditTool(file_locks)
    tools["apply_patch"] = ApplyPatchTool(file_locks)
    tools["glob"] = GlobTool()
    tools["grep"] = GrepTool(find_ripgrep())
    if settings.exec_enabled:
        # One registry shared by both: exec starts background processes, process manages them.
        launcher = ShellLauncher(settings.exec_env_allow, exec_user(settings))
        processes = ProcessRegistry(launcher)
        tools["exec"] = ExecTool(
            launcher=launcher,
            registry=processes,
            default_timeout=settings.exec_timeout,
            max_timeout=settings.exec_timeout_max,
        )
        tools["process"] = ProcessTool(processes)
    tools["web_fetch"] = WebFetchTool.from_settings(settings)
    tools["web_search"] = WebSearchTool.from_settings(settings)
    ordered = {name: tools[name] for name in BUILTIN_NAMES if name in tools}
    rules = settings.tenant_rules()
    return ToolCatalog(
        builtins=ordered, limits=settings.tool_limits(), withheld=rules.withheld_tools if rules.auth_enabled else None
    )


def exec_user(settings: ServerSettings) -> CommandUser | None:
    user = command_user(settings.exec_user)
    if user is not None:
        blocked = unreachable_from(Path(settings.workspace_dir).resolve(), user)
        if blocked is not None:
            logger.warning(
                "exec commands run as %s, who cannot enter %s: they reach the workspace through relative paths "
                "only; put workspace_dir where that user can reach it",
                user.name,
                blocked,
                extra={"category": "system"},
            )
    return user
