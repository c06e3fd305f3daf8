"""Fixtures of the integration tests that serve hosts of their own (hook services)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest


@pytest.fixture
async def hosts() -> AsyncIterator[list[grpc.aio.Server]]:
    """gRPC servers a test starts (hook hosts); every one is stopped at the end."""
    servers: list[grpc.aio.Server] = []
    yield servers
    for server in servers:
        await server.stop(None)
