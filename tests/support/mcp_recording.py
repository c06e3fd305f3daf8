"""The test MCP server (tests/support/mcp_server.py) over streamable HTTP inside the test's own event loop, behind
an ASGI wrapper that records every HTTP request it gets: method, headers and, for a POST, the JSON-RPC method of
its body (so a test finds the `tools/call` request and reads the headers it came with)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from tests.support.hook_host import wait_until
from tests.support.mcp_server import free_port
from tests.support.mcp_server import server as mcp_server

Scope = MutableMapping[str, Any]


@dataclass
class SeenRequest:
    method: str
    headers: dict[str, str]
    body: bytearray = field(default_factory=bytearray)

    @property
    def rpc(self) -> str:
        """The JSON-RPC method of a POST's body ("" for other requests or an unreadable body)."""
        try:
            message = json.loads(self.body)
        except ValueError:
            return ""
        return str(message.get("method", "")) if isinstance(message, dict) else ""


@dataclass
class RecordingServer:
    url: str
    seen: list[SeenRequest]

    def calls(self, rpc: str) -> list[SeenRequest]:
        return [r for r in self.seen if r.rpc == rpc]


@asynccontextmanager
async def recording_mcp_server() -> AsyncIterator[RecordingServer]:
    app = mcp_server.streamable_http_app()
    seen: list[SeenRequest] = []

    async def recording(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = SeenRequest(
            method=str(scope["method"]), headers={k.decode(): v.decode() for k, v in scope["headers"]}
        )
        seen.append(request)

        async def reading() -> Any:
            message = await receive()
            if message.get("type") == "http.request":
                request.body.extend(message.get("body", b""))
            return message

        await app(scope, reading, send)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(recording, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started or task.done(), describe=lambda: "the MCP server did not start")
        assert not task.done(), "the MCP server stopped at start"
        yield RecordingServer(url=f"http://127.0.0.1:{port}/mcp", seen=seen)
    finally:
        server.should_exit = True
        await task
