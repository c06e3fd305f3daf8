"""The fake API server in the caller's event loop: its lifecycle, its reply script and its recording."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from types import TracebackType

from aiohttp import web

from .handler import MessagesHandler
from .prompt_cache import PromptCache
from .recording import RecordedRequest, Responder
from .replies import ErrorReply, ReplyLike, TextReply
from .signals import ThreadSafeEvent
from .wire import MAX_REQUEST_BYTES


@dataclass
class _Queued:
    """A queue entry: the reply and how many more requests it answers."""

    reply: ReplyLike
    uses: int


class FakeAnthropic(MessagesHandler):
    """The fake API server, running in the caller's event loop.

    All scripting state sits behind one lock, so :class:`FakeAnthropicThread`
    can drive an instance from another thread.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_reply: ReplyLike | None = None,
        responder: Responder | None = None,
        validate: bool = True,
        prompt_cache: bool = False,
    ) -> None:
        """Configure the server; nothing listens until :meth:`start`.

        ``validate`` checks auth and required fields like the real API; turn it
        off for clients that deliberately send odd requests. ``prompt_cache``
        reports cache reads and writes for requests with ``cache_control``
        breakpoints, as the real API does (:class:`PromptCache`); replies that
        script their own usage keep it.
        """
        self.prompt_cache = PromptCache() if prompt_cache else None
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._queue: deque[_Queued] = deque()
        self._default_reply: ReplyLike = default_reply if default_reply is not None else TextReply("ok")
        self._responder = responder
        self.validate = validate
        self._requests: list[RecordedRequest] = []
        self._all_requests: list[RecordedRequest] = []
        self._recorded_signal = ThreadSafeEvent()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------- #

    async def start(self) -> None:
        """Bind the port and start serving in the running loop."""
        if self._runner is not None:
            raise RuntimeError("FakeAnthropic already started")
        self._stopping = False
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that drops the connection cancels its
        # handler, which is how `disconnected` is noticed promptly.
        runner = web.AppRunner(
            app,
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        sock = socket.create_server((self._host, self._port))
        site = web.SockSite(runner, sock)
        try:
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        port = sock.getsockname()[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._runner = runner
        self._base_url = f"http://{host}:{port}"

    async def stop(self) -> None:
        """Stop serving; open streams (hung ones included) are cut off."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping = True
        await runner.cleanup()

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``), for ``AsyncAnthropic(base_url=...)``."""
        if self._base_url is None:
            raise RuntimeError("FakeAnthropic is not started")
        return self._base_url

    # -- scripting ---------------------------------------------------------- #

    def enqueue(self, *replies: ReplyLike) -> None:
        """Append replies to the FIFO; each ``POST /v1/messages`` consumes one.

        An :class:`ErrorReply` with ``times=N`` stays at the head for N requests.
        """
        with self._lock:
            for reply in replies:
                uses = reply.times if isinstance(reply, ErrorReply) else 1
                self._queue.append(_Queued(reply, uses))

    @property
    def default_reply(self) -> ReplyLike:
        """The reply used when the queue is empty and there is no responder."""
        with self._lock:
            return self._default_reply

    @default_reply.setter
    def default_reply(self, reply: ReplyLike) -> None:
        with self._lock:
            self._default_reply = reply

    @property
    def responder(self) -> Responder | None:
        """A callable choosing each reply from the request; overrides the queue.

        It runs on the server's loop (the server thread, in thread mode).
        """
        with self._lock:
            return self._responder

    @responder.setter
    def responder(self, responder: Responder | None) -> None:
        with self._lock:
            self._responder = responder

    @property
    def pending_replies(self) -> int:
        """How many scripted requests the queue still covers."""
        with self._lock:
            return sum(q.uses for q in self._queue)

    def clear(self) -> None:
        """Drop queued replies and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._all_requests.clear()

    # -- recording ---------------------------------------------------------- #

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of every ``POST /v1/messages`` received, in arrival order (rejected ones too)."""
        with self._lock:
            return list(self._requests)

    @property
    def all_requests(self) -> list[RecordedRequest]:
        """Snapshot of every request on any path (count_tokens, 404s, ...)."""
        with self._lock:
            return list(self._all_requests)

    async def wait_for_requests(
        self,
        n: int,
        timeout: float = 5.0,  # noqa: ASYNC109 - "not in time" is a test failure to report
    ) -> list[RecordedRequest]:
        """Wait until at least ``n`` message requests were recorded; return them.

        Raises ``TimeoutError`` naming how many arrived, so a hung test says why.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._requests) >= n:
                    return list(self._requests)
                signal_ = self._recorded_signal
                have = len(self._requests)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"expected {n} requests to the fake, got {have} in {timeout}s")
            await signal_.wait(remaining)

    def wait_for_requests_blocking(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Thread-blocking :meth:`wait_for_requests`, for sync callers."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._requests) >= n:
                    return list(self._requests)
                signal_ = self._recorded_signal
                have = len(self._requests)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"expected {n} requests to the fake, got {have} in {timeout}s")
            signal_.wait_blocking(remaining)

    def _record(self, rec: RecordedRequest, is_message: bool) -> None:
        with self._lock:
            rec.index = len(self._all_requests)
            self._all_requests.append(rec)
            if is_message:
                self._requests.append(rec)
            signal_, self._recorded_signal = self._recorded_signal, ThreadSafeEvent()
        signal_.set()

    async def _next_reply(self, rec: RecordedRequest) -> ReplyLike:
        with self._lock:
            responder = self._responder
            if responder is None:
                if self._queue:
                    head = self._queue[0]
                    head.uses -= 1
                    if head.uses <= 0:
                        self._queue.popleft()
                    return head.reply
                return self._default_reply
        result = responder(rec)
        if isinstance(result, Awaitable):
            return await result
        return result
