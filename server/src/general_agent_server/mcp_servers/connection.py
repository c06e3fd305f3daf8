"""One connection to one MCP server, owned by one task: the `mcp` SDK's anyio scopes (the stdio child, the
HTTP session, the client session) open and close in that task. Tool calls are handed to it and run
concurrently inside its task group; the caller waits for its answer with the call timeout and cancels the
call when it goes away (a stopped run).

A stdio server runs in its own process group (the SDK starts it in a new session) and is killed with its
children when the connection closes; its stderr goes to a file whose tail explains a failed start. States:
CONNECTING until the tools are listed, READY, FAILED (with the error) when it cannot start or dies.

With `trace_context` (tracing on), a call runs in the caller's context (its tool span current: the SDK sends
each message in its sender's context) and every HTTP request gets that span's W3C trace context as headers; the
connection's own requests (opening it, listing tools) get the context the connection was started in.

The SDK's client modules are imported by the first connection, in a thread, not at start-up: they take most of
a second to import, and most servers never connect an MCP server."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import logging
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio
import httpx2
import mcp_types

from general_agent_server.mcp_servers.config import McpServerSpec
from general_agent_server.observability.tracing import inject_trace_context
from general_agent_server.security.redaction import redact_text

if TYPE_CHECKING:
    from mcp import Client

logger = logging.getLogger(__name__)


class ServerState(enum.Enum):
    CONNECTING = "CONNECTING"
    READY = "READY"
    FAILED = "FAILED"
    DISABLED = "DISABLED"


class McpCallError(Exception):
    """A call that got no result: the server is not ready, failed, timed out, or refused the call."""


@dataclass(kw_only=True)
class _Call:
    name: str
    arguments: dict[str, Any]
    answer: asyncio.Future[mcp_types.CallToolResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    # The caller's, when the trace context is sent (see the module docstring).
    context: contextvars.Context | None = None


class McpConnection:
    """See the module docstring. `start` once; `close` ends the task and everything it opened."""

    def __init__(self, spec: McpServerSpec, *, cwd: Path, call_timeout: float, trace_context: bool = False) -> None:
        self.spec = spec
        self._trace_context = trace_context
        self.state = ServerState.CONNECTING
        self.error = ""
        self.tools: list[mcp_types.Tool] = []
        self._cwd = cwd
        self._call_timeout = call_timeout
        self._calls: asyncio.Queue[_Call | None] = asyncio.Queue()
        self._settled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stderr: IO[str] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.spec.name}")

    async def wait_settled(self, timeout: float) -> None:  # noqa: ASYNC109 - a bound on waiting, not a deadline
        """Waits until the server is READY or FAILED, at most `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._settled.wait()

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        if self.state is not ServerState.READY or not self.running:
            raise McpCallError(f"MCP server {self.spec.name} is not ready ({self.state.value.lower()}): {self.error}")
        call = _Call(name=name, arguments=arguments)
        if self._trace_context:
            call.context = contextvars.copy_context()
        await self._calls.put(call)
        try:
            async with asyncio.timeout(self._call_timeout):
                return await asyncio.shield(call.answer)
        except TimeoutError:
            raise McpCallError(f"MCP tool {name} timed out after {self._call_timeout:g}s") from None
        finally:
            if not call.answer.done():
                call.scope.cancel()

    async def close(self) -> None:
        task = self._task
        if task is None:
            return
        await self._calls.put(None)
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            self._close_stderr()

    # ------------------------------------------------------------------ the connection's task
    async def _run(self) -> None:
        try:
            await asyncio.to_thread(_import_sdk)
            from mcp import Client

            async with Client(self._transport(), read_timeout_seconds=self._call_timeout) as client:
                self.tools = await _list_tools(client)
                self.state = ServerState.READY
                self._settled.set()
                async with anyio.create_task_group() as group:
                    while (call := await self._calls.get()) is not None:
                        if call.context is None:
                            group.start_soon(self._answer, client, call)
                        else:  # the task starts in (a copy of) the caller's context
                            call.context.run(group.start_soon, self._answer, client, call)
                    group.cancel_scope.cancel()
        except Exception as exc:
            self._failed(exc)
        except BaseException as exc:  # cancelled by close after its grace: every pending call hears of it
            self._failed(exc)
            raise
        finally:
            self._settled.set()
            self._fail_pending()

    async def _answer(self, client: Client, call: _Call) -> None:
        with call.scope:
            try:
                result = await client.call_tool(call.name, call.arguments)
            except Exception as exc:
                if not call.answer.done():
                    call.answer.set_exception(McpCallError(f"MCP tool {call.name} failed: {_describe(exc)}"))
                await self._check_alive(client, exc)
                return
            if not call.answer.done():
                call.answer.set_result(result)
        if not call.answer.done():
            call.answer.set_exception(McpCallError(f"MCP tool {call.name} was cancelled"))

    async def _check_alive(self, client: Client, cause: Exception) -> None:
        """A call failed: when the server does not answer a listing either, it is gone (a crashed stdio process,
        a dropped HTTP session); the connection ends FAILED and the next use starts it again."""
        try:
            with anyio.fail_after(5):
                await client.list_tools(cache_mode="bypass")
        except Exception:
            if self.state is ServerState.READY:
                self._failed(cause, exited=True)
                self._calls.put_nowait(None)

    def _transport(self) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        spec = self.spec
        if spec.transport == "http":
            hooks = {"request": [_send_trace_context]} if self._trace_context else {}
            http = httpx2.AsyncClient(
                headers=dict(spec.headers),
                timeout=httpx2.Timeout(self._call_timeout, connect=10),
                event_hooks=hooks,
            )
            return _owning(http, streamable_http_client(spec.url, http_client=http))
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in close
        cwd = Path(spec.cwd) if spec.cwd and Path(spec.cwd).is_absolute() else self._cwd / spec.cwd
        cwd.mkdir(parents=True, exist_ok=True)
        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=cwd)
        return stdio_client(params, errlog=self._stderr)

    def _failed(self, exc: BaseException, *, exited: bool = False) -> None:
        was_ready = exited or self.state is ServerState.READY
        if self.state is ServerState.FAILED:
            return  # the first cause is the one reported
        self.state = ServerState.FAILED
        reason = _describe(exc) if not isinstance(exc, asyncio.CancelledError) else "closed"
        stderr = self._stderr_tail()
        self.error = redact_text(f"{'exited' if was_ready else 'could not start'}: {reason}{stderr}")[:2000]
        logger.warning("MCP server %s %s", self.spec.name, self.error, extra={"category": "system"})

    def _fail_pending(self) -> None:
        while not self._calls.empty():
            call = self._calls.get_nowait()
            if call is not None and not call.answer.done():
                call.answer.set_exception(McpCallError(f"MCP server {self.spec.name} {self.error or 'closed'}"))

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            tail = self._stderr.read()[-500:].strip()
            return f" (stderr: {tail})" if tail else ""
        return ""

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _import_sdk() -> None:
    import mcp.client.stdio
    import mcp.client.streamable_http  # noqa: F401 - imported for the connection's later `from` imports


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a paginator that never ends cannot hang a start
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def _send_trace_context(request: httpx2.Request) -> None:
    """An HTTP request to the server: `traceparent` (and `tracestate`) of the span current where it is sent."""
    inject_trace_context(request.headers)


@contextlib.asynccontextmanager
async def _owning(http: httpx2.AsyncClient, transport: Any) -> AsyncIterator[Any]:
    """The HTTP transport, closing the HTTP client it was given when it closes."""
    async with http, transport as streams:
        yield streams


def _describe(exc: BaseException) -> str:
    """An exception as one line; exception groups (anyio's task groups) by their first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text
