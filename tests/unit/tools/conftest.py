"""Fixtures of the tool unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.fake_web import FakeWeb


@pytest.fixture
async def web() -> AsyncIterator[FakeWeb]:
    """A fake web server on a loopback port (tests/support/fake_web.py)."""
    async with FakeWeb() as server:
        yield server
