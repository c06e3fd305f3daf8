"""The MemoryBackend conformance suite (memory/testing) against every backend: the local SQLite FTS5 backend,
the in-process fake, and the EverMe backend against the fake gateway (whose store belongs to one token, so it
runs the core tests only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from general_agent_server.memory.everme.backend import EverMeBackend
from general_agent_server.memory.everme.config import EverMeConfig, normalise_base
from general_agent_server.memory.local import LocalMemoryBackend
from general_agent_server.memory.port import MemoryBackend
from general_agent_server.memory.testing import MemoryBackendConformance, MemoryBackendCore
from general_agent_server.memory.testing.fake import InMemoryBackend
from tests.support.fake_everme import FakeEverMe

TOKEN = "evt_" + "c0nf0rmance" * 4


class TestLocalBackend(MemoryBackendConformance):
    async def make_backend(self, directory: Path) -> MemoryBackend:
        return LocalMemoryBackend(directory / "memory.db")


class TestInMemoryBackend(MemoryBackendConformance):
    async def make_backend(self, directory: Path) -> MemoryBackend:
        return InMemoryBackend()


class TestEverMeBackend(MemoryBackendCore):
    @pytest_asyncio.fixture(autouse=True)
    async def gateway(self) -> AsyncIterator[FakeEverMe]:
        async with FakeEverMe(tokens=frozenset({TOKEN})) as fake:
            self.fake = fake
            yield fake

    async def make_backend(self, directory: Path) -> MemoryBackend:
        config = EverMeConfig(api_base=normalise_base(self.fake.base_url), token=TOKEN, agent_id="agent-1")
        return EverMeBackend(config)
