"""Who may configure which MCP server: the operator (no authentication, or an `admin` caller) any command and
any URL; a `tenant` caller only stdio commands on the `mcp_stdio_allow` list, and only URLs that pass the SSRF
guard (their hosts may not be loopback, private, link-local or metadata addresses unless allow-listed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from general_agent_server.domain.context import CallContext, CallerRole
from general_agent_server.domain.errors import invalid_argument, quoted
from general_agent_server.mcp_servers.config import McpServerSpec, read_servers
from general_agent_server.security.ssrf import SsrfBlocked, check_host


async def check_servers(
    ctx: CallContext,
    servers: Mapping[str, Mapping[str, Any]],
    field_path: str,
    *,
    stdio_allow: frozenset[str],
    ssrf_allow_hosts: frozenset[str],
) -> dict[str, McpServerSpec]:
    specs = read_servers(servers, field_path)
    if ctx.role is not CallerRole.TENANT:
        return specs
    for name, spec in specs.items():
        where = f"{field_path}[{quoted(name)}]"
        if spec.transport == "stdio":
            if spec.command not in stdio_allow:  # the exact command: a basename would let any path through
                raise invalid_argument(
                    f"{where}.stdio.command", "this command is not on the server's mcp_stdio_allow list"
                )
            continue
        try:
            await check_host(urlsplit(spec.url).hostname or "", ssrf_allow_hosts)
        except SsrfBlocked as blocked:
            raise invalid_argument(f"{where}.http.url", f"MCP URL refused: {blocked.reason}") from None
    return specs
