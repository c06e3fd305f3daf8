"""The aiohttp server under the fake HTTP services of the tests (fake_web.py, fake_everme.py): one application on
a loopback address (port 0 unless the fake names one), every request handed to the fake's `_dispatch`, and
`_release` set when the server stops so that responses a fake holds back end."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import ClassVar, Self

from aiohttp import web


class LoopbackHttp:
    host: str
    port: int
    # aiohttp's defaults unless a fake needs otherwise.
    client_max_size: ClassVar[int] = 1024**2
    handler_cancellation: ClassVar[bool] = False
    _runner: web.AppRunner | None = None
    _release: asyncio.Event  # made when the server starts

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._release = asyncio.Event()
        app = web.Application(client_max_size=self.client_max_size)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=self.handler_cancellation)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"
