"""A blocking facade over :class:`~general_agent.AgentClient`, for scripts and notebooks.

Example::

    from general_agent.sync import AgentClient

    with AgentClient("127.0.0.1:50051") as client:
        @client.hosted_tool("weather")
        def weather(city: str) -> str:
            return f"sunny in {city}"

        sid = client.create_session().identity.session_id
        print(client.run(sid, "Weather in Paris?").text)

Every method of the async client is here with the same arguments: a coroutine becomes a blocking call, an async
iterator (``stream_turn``, ``watch``, ``list_sessions``, ``history`` ...) a plain iterator. The async client runs
on an event loop in a daemon thread owned by this object, so it also works where a loop is already running
(Jupyter). Hosted-tool handlers and ``on_approval`` may be plain functions: they run in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from general_agent import client as async_client
from general_agent.event_types import Event
from general_agent.runner import RunResult

__all__ = ["AgentClient"]

T = TypeVar("T")
_DONE = object()


class AgentClient:
    """The blocking client: ``AgentClient(address, **options)`` takes the async client's options."""

    def __init__(self, address: str, *, connect_timeout: float | None = 10.0, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="general-agent-sync", daemon=True)
        self._thread.start()
        try:
            self._client = self._call(
                async_client.AgentClient.connect(address, connect_timeout=connect_timeout, **options)
            )
        except BaseException:
            self._stop_loop()
            raise

    # ------------------------------------------------------------------ plumbing
    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """Pulls ``iterator`` one item at a time on the loop. Left early (``break``, an exception, a
        KeyboardInterrupt while waiting), the pending step is cancelled and the iterator closed on the loop."""
        steps: list[asyncio.Task[Any]] = []

        async def step() -> Any:
            task = asyncio.current_task()
            assert task is not None
            steps[:] = [task]
            try:
                return await anext(iterator)
            except StopAsyncIteration:
                return _DONE

        try:
            while (item := self._call(step())) is not _DONE:
                yield item
        finally:
            self._call(_finish(steps, iterator))

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if inspect.iscoroutinefunction(attribute):
            return functools.wraps(attribute)(lambda *args, **kwargs: self._call(attribute(*args, **kwargs)))
        if inspect.isasyncgenfunction(attribute):
            return functools.wraps(attribute)(lambda *args, **kwargs: self._iterate(attribute(*args, **kwargs)))
        return attribute

    # ------------------------------------------------------------------ what differs from the async client
    def hosted_tool(
        self, name: str | None = None, *, description: str | None = None, timeout: float | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Registers a handler (a plain or an async function) as a hosted tool; see
        :meth:`general_agent.AgentClient.hosted_tool`."""
        register = self._client.hosted_tool(name, description=description, timeout=timeout)

        def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
            register(handler if inspect.iscoroutinefunction(handler) else _in_thread(handler))
            return handler

        return decorate

    def run(self, session_id: str, text_or_parts: Any, **options: Any) -> RunResult:
        """Drives one run to its end (see :meth:`general_agent.AgentClient.run`) and returns its result."""

        async def drive() -> RunResult:
            result: RunResult = await self._run(session_id, text_or_parts, options)
            return result

        return self._call(drive())

    def run_events(self, session_id: str, text_or_parts: Any, **options: Any) -> Iterator[Event]:
        """The run's typed events as they come; leaving early cancels the run."""
        return self._iterate(aiter(self._run(session_id, text_or_parts, options)))

    def _run(self, session_id: str, text_or_parts: Any, options: dict[str, Any]) -> Any:
        on_approval = options.get("on_approval")
        if on_approval is not None and not inspect.iscoroutinefunction(on_approval):
            options["on_approval"] = _in_thread(on_approval)
        return self._client.run(session_id, text_or_parts, **options)

    # ------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Closes the channel and stops the loop thread. Idempotent."""
        if self._loop.is_closed():
            return
        try:
            self._call(self._client.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


async def _finish(steps: list[asyncio.Task[Any]], iterator: AsyncIterator[Any]) -> None:
    """Runs after the last step was scheduled (the loop runs callbacks in order), so `steps` names it."""
    for task in steps:
        if not task.done():
            task.cancel()  # the async iterator cleans up at its await (a run cancels itself)
            await asyncio.wait({task})
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def _in_thread(function: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    @functools.wraps(function)
    async def threaded(*args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(function, *args, **kwargs)

    return threaded
