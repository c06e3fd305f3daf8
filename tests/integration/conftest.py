"""Fixtures of the integration tests: hosts a test serves itself (hook services), and the half-close of every
RunSession call a test opened (tests/support/bidi.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from tests.support.bidi import close_request_iterators  # autouse: every Bidi is half-closed after its test

__all__ = ["close_request_iterators"]


@pytest.fixture
async def hosts() -> AsyncIterator[list[grpc.aio.Server]]:
    """gRPC servers a test starts (hook hosts); every one is stopped at the end."""
    servers: list[grpc.aio.Server] = []
    yield servers
    for server in servers:
        await server.stop(None)
