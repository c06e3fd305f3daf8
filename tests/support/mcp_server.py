"""An MCP server for the tests, built with the `mcp` SDK's server classes, over stdio or streamable HTTP.

    python -m tests.support.mcp_server stdio [--tag TAG]
    python -m tests.support.mcp_server http --port PORT [--token TOKEN] [--hang]

Its tools answer text (`echo`), a structured result (`add`), an image (`picture`), an error result (`fail`),
after a while (`slow`), by dying (`crash`, stdio only), and under a name a built-in tool has (`read`). With
`--token` the HTTP server answers 401 unless `Authorization: Bearer TOKEN` is sent; with `--hang` it accepts
connections and never answers (a server that hangs)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import ToolAnnotations

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

server = MCPServer("test-tools")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Returns the text it is given."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> dict[str, Any]:
    """Adds two integers; the sum comes back as a structured result too."""
    return {"sum": a + b}


@server.tool()
def picture() -> Image:
    """A one-pixel PNG."""
    return Image(data=PNG, format="png")


@server.tool()
def fail(reason: str = "it failed") -> str:
    """Always fails, with the reason given."""
    raise ToolError(reason)


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after the given seconds."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def crash() -> str:
    """Ends the server process at once (a crashing server)."""
    os._exit(3)


@server.tool(name="read")
def read_tool(key: str) -> str:
    """A tool whose name a built-in tool has: it is offered as test__read."""
    return f"value of {key}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _hang(port: int) -> None:
    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    listening = await asyncio.start_server(accept, "127.0.0.1", port)
    async with listening:
        await listening.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="")
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--tag", default="", help="marks the process, so a test can find it")
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
        return
    if args.hang:
        asyncio.run(_hang(args.port))
        return
    import uvicorn
    from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    app = server.streamable_http_app()
    if args.token:
        expected = f"Bearer {args.token}"

        async def check_token(request: Request, call_next: RequestResponseEndpoint) -> Response:
            if request.headers.get("authorization") != expected:
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            return await call_next(request)

        app.add_middleware(BaseHTTPMiddleware, dispatch=check_token)

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


def processes_tagged(tag: str) -> list[int]:
    """Live processes whose command line carries `--tag TAG`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tag.encode() in args and state != "Z":
            found.append(int(entry))
    return found


if __name__ == "__main__":
    main()
