"""MCP server configurations: the map a session stores (the proto JSON form of `McpServerConfig`, keyed by the
name the session gives the server), read into typed specs, checked with the field named, and masked for reads.

Header and env values are secrets: they rest in the state database (mode 0600) and nowhere else. They are
registered with the redactor when read, and every read through the API masks them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from general_agent_server.domain.errors import invalid_argument, quoted
from general_agent_server.security.redaction import register_secret

MASK = "****"
MAX_SERVERS = 32
_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_TOOL_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_TOOL_NAME = 64


@dataclass(frozen=True, kw_only=True, slots=True)
class McpServerSpec:
    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


def read_servers(servers: Mapping[str, Mapping[str, Any]], field_path: str = "mcp_servers") -> dict[str, McpServerSpec]:
    """Typed specs of a stored or requested map; refuses what cannot be a server, naming the field."""
    if len(servers) > MAX_SERVERS:
        raise invalid_argument(field_path, f"at most {MAX_SERVERS} servers")
    specs = {}
    for name, config in servers.items():
        where = f"{field_path}[{quoted(name)}]"
        if not _SERVER_NAME.match(name):
            raise invalid_argument(
                where, "a server name is 1-63 letters, digits, '_', '.' or '-', starting alphanumeric"
            )
        specs[name] = _read_one(name, config, where)
    return specs


def _read_one(name: str, config: Mapping[str, Any], where: str) -> McpServerSpec:
    stdio, http = config.get("stdio"), config.get("http")
    if (stdio is None) == (http is None):
        raise invalid_argument(where, "set exactly one of stdio and http")
    if stdio is not None:
        if not isinstance(stdio, Mapping):
            raise invalid_argument(f"{where}.stdio", "expected an object")
        command = str(stdio.get("command", "")).strip()
        if not command:
            raise invalid_argument(f"{where}.stdio.command", "is required")
        env = _strings(stdio.get("env", {}), f"{where}.stdio.env")
        return McpServerSpec(
            name=name,
            transport="stdio",
            command=command,
            args=tuple(str(a) for a in stdio.get("args", ())),
            env={k: register_secret(v) for k, v in env.items()},
            cwd=str(stdio.get("cwd", "")),
        )
    assert http is not None
    if not isinstance(http, Mapping):
        raise invalid_argument(f"{where}.http", "expected an object")
    url = str(http.get("url", "")).strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid_argument(f"{where}.http.url", "expected an http(s) URL with a host")
    headers = _strings(http.get("headers", {}), f"{where}.http.headers")
    return McpServerSpec(
        name=name, transport="http", url=url, headers={k: register_secret(v) for k, v in headers.items()}
    )


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise invalid_argument(where, "expected a map of strings")
    return dict(value)


def masked(servers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The map as reads answer it: every env and header value replaced by a mask, the keys kept."""
    out: dict[str, dict[str, Any]] = {}
    for name, config in servers.items():
        copy = {kind: dict(value) for kind, value in config.items() if isinstance(value, Mapping)}
        for kind, secret_field in (("stdio", "env"), ("http", "headers")):
            if kind in copy and isinstance(copy[kind].get(secret_field), Mapping):
                copy[kind][secret_field] = dict.fromkeys(copy[kind][secret_field], MASK)
        out[name] = copy
    return out


def exposed_name(server: str, tool: str) -> str:
    """`<server>__<tool>` with characters the provider refuses mapped to `_`, hashed down when too long."""
    name = _TOOL_CHARS.sub("_", f"{server}__{tool}")
    if len(name) <= _MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_TOOL_NAME - 9]}_{digest}"


def exposed_names(tools: Mapping[str, Iterable[str]], taken: set[str]) -> dict[tuple[str, str], str]:
    """The name each (server, tool) is offered under. A tool keeps its own name unless it collides with a
    built-in or hosted tool (`taken`), with another server's tool, or is not a name the provider accepts; then
    it is `<server>__<tool>`. Built-in and hosted names never change."""
    counts: dict[str, int] = {}
    for names in tools.values():
        for tool in set(names):
            counts[tool] = counts.get(tool, 0) + 1
    exposed = {}
    for server, names in tools.items():
        for tool in names:
            plain = tool not in taken and counts[tool] == 1 and not _TOOL_CHARS.search(tool) and len(tool) <= 64
            exposed[(server, tool)] = tool if plain else exposed_name(server, tool)
    return exposed
