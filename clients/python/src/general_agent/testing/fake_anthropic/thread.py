"""Thread mode: the fake on its own event loop in a daemon thread, for sync tests and for tests whose server
under test is a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

from .recording import RecordedRequest, Responder
from .replies import ReplyLike
from .server import FakeAnthropic


class FakeAnthropicThread:
    """:class:`FakeAnthropic` on its own event loop in a daemon thread, driven from sync code.

    Why: a sync test, or one whose server under test is a subprocess, has no
    loop of its own to run the fake on. The scripting API is the same and is
    thread-safe; ``responder`` runs on the fake's thread.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_reply: ReplyLike | None = None,
        responder: Responder | None = None,
        validate: bool = True,
    ) -> None:
        """Configure the server; nothing listens until :meth:`start`."""
        self.fake = FakeAnthropic(
            host=host, port=port, default_reply=default_reply, responder=responder, validate=validate
        )
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start the thread and block until the server is listening."""
        if self._thread is not None:
            raise RuntimeError("FakeAnthropicThread already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
            try:
                await self.fake.start()
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            try:
                await self._stop_event.wait()
            finally:
                await self.fake.stop()

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), name="fake-anthropic", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("fake Anthropic server did not start")
        if errors:
            self._thread.join()
            self._thread = None
            raise errors[0]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and join its thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout)

    def __enter__(self) -> FakeAnthropicThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``)."""
        return self.fake.base_url

    def enqueue(self, *replies: ReplyLike) -> None:
        """See :meth:`FakeAnthropic.enqueue`."""
        self.fake.enqueue(*replies)

    @property
    def default_reply(self) -> ReplyLike:
        """See :attr:`FakeAnthropic.default_reply`."""
        return self.fake.default_reply

    @default_reply.setter
    def default_reply(self, reply: ReplyLike) -> None:
        self.fake.default_reply = reply

    @property
    def responder(self) -> Responder | None:
        """See :attr:`FakeAnthropic.responder`; it runs on the fake's thread."""
        return self.fake.responder

    @responder.setter
    def responder(self, responder: Responder | None) -> None:
        self.fake.responder = responder

    @property
    def pending_replies(self) -> int:
        """See :attr:`FakeAnthropic.pending_replies`."""
        return self.fake.pending_replies

    def clear(self) -> None:
        """See :meth:`FakeAnthropic.clear`."""
        self.fake.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """See :attr:`FakeAnthropic.requests`."""
        return self.fake.requests

    @property
    def all_requests(self) -> list[RecordedRequest]:
        """See :attr:`FakeAnthropic.all_requests`."""
        return self.fake.all_requests

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` message requests were recorded; return them."""
        return self.fake.wait_for_requests_blocking(n, timeout)
