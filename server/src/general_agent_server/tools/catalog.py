"""The server's built-in tools, built from the server settings, in the order the model is offered them."""

from __future__ import annotations

from general_agent_server.config import ServerSettings
from general_agent_server.core.tools import LocalTool, ToolCatalog
from general_agent_server.tools.read import ReadTool

# The order tools are offered in (reference general-agent-sdk.md 11.2, plus glob and grep).
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
    ordered = {name: tools[name] for name in BUILTIN_NAMES if name in tools}
    return ToolCatalog(builtins=ordered, limits=settings.tool_limits())
