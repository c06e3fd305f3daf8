"""The server's built-in tools."""

from __future__ import annotations

from general_agent_server.core.tools import LocalTool, ToolCatalog, ToolLimits
from general_agent_server.tools.read import ReadTool

BUILTIN_NAMES = ("read",)


def builtin_catalog(limits: ToolLimits | None = None) -> ToolCatalog:
    tools: dict[str, LocalTool] = {"read": ReadTool()}
    return ToolCatalog(builtins=tools, limits=limits or ToolLimits())
