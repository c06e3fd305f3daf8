"""Shared fixtures: the fake Anthropic server, an in-process server on port 0, and a stub."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest

from general_agent.testing import FakeAnthropic
from general_agent.v1 import agent_service_pb2_grpc
from general_agent_server.app import RunningServer, start_server
from general_agent_server.config import load_settings
from tests.support.postgres import postgres_url  # the throwaway PostgreSQL cluster's fixture

__all__ = ["postgres_url"]

TEST_API_KEY = "sk-ant-test-key-0123456789"


class _Unobserved(logging.Handler):
    """Collects asyncio's reports of a task or future whose exception nobody retrieved."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.reports: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "exception was never retrieved" in message:
            self.reports.append(message)


@pytest.fixture(autouse=True)
def no_unobserved_exceptions() -> Iterator[None]:
    """Fails a test after which a task or future is collected with an exception nobody looked at: such an
    exception is a failure the server swallowed."""
    handler = _Unobserved()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        yield
        gc.collect()
    finally:
        logger.removeHandler(handler)
    assert handler.reports == [], "an asyncio task or future ended with an exception nobody retrieved"


@pytest.fixture
async def fake_model() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as fake:
        yield fake


ServerFactory = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
async def server_factory(tmp_path: Path, fake_model: FakeAnthropic) -> AsyncIterator[ServerFactory]:
    """Starts servers on port 0 with the given env overrides; all are stopped at the end."""
    started: list[RunningServer] = []

    async def factory(env: dict[str, str] | None = None, *, state_dir: Path | None = None) -> RunningServer:
        environ = {
            "ANTHROPIC_API_KEY": TEST_API_KEY,
            "ANTHROPIC_BASE_URL": fake_model.base_url,
            "GENERAL_AGENT_LISTEN": "127.0.0.1:0",
            "GENERAL_AGENT_STATE_DIR": str(state_dir or tmp_path / "state"),
            "GENERAL_AGENT_MODEL_MAX_RETRIES": "0",
            "GENERAL_AGENT_SHUTDOWN_GRACE": "2",
        }
        environ.update(env or {})
        server = await start_server(load_settings(None, environ))
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        await server.stop(grace=1.0)


@pytest.fixture
async def server(server_factory: ServerFactory) -> RunningServer:
    return await server_factory()


@pytest.fixture
async def stub(server: RunningServer) -> AsyncIterator[agent_service_pb2_grpc.AgentServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel)
