"""MCP messages ↔ domain: server maps as the proto JSON form the session stores, and statuses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from general_agent.v1 import mcp_pb2
from general_agent_server.mcp_servers.servers import ServerStatus

_STATES = {
    "CONNECTING": mcp_pb2.MCP_SERVER_STATE_CONNECTING,
    "READY": mcp_pb2.MCP_SERVER_STATE_READY,
    "FAILED": mcp_pb2.MCP_SERVER_STATE_FAILED,
    "DISABLED": mcp_pb2.MCP_SERVER_STATE_DISABLED,
}
_TRANSPORTS = {"stdio": mcp_pb2.MCP_TRANSPORT_STDIO, "http": mcp_pb2.MCP_TRANSPORT_HTTP}


def servers_from_proto(servers: Mapping[str, mcp_pb2.McpServerConfig]) -> dict[str, dict[str, Any]]:
    return {name: json_format.MessageToDict(config) for name, config in servers.items()}


def servers_to_proto(servers: Mapping[str, Mapping[str, Any]]) -> dict[str, mcp_pb2.McpServerConfig]:
    return {name: json_format.ParseDict(dict(config), mcp_pb2.McpServerConfig()) for name, config in servers.items()}


def status_to_proto(status: ServerStatus) -> mcp_pb2.McpServerStatus:
    return mcp_pb2.McpServerStatus(
        server_name=status.name,
        transport=_TRANSPORTS[status.transport],
        enabled=status.enabled,
        supported=True,
        state=_STATES[status.state.value],
        tool_count=status.tool_count,
        error=status.error,
    )
