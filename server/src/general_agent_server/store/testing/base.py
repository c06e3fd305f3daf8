"""What every conformance class shares: the store factory a subclass provides and the `store` fixture."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TypeVar

import pytest
import pytest_asyncio

from general_agent_server.store.port import SessionStore

C = TypeVar("C", bound=type)


def async_tests(cls: C) -> C:
    """Marks the class's own async tests for pytest-asyncio, so the suite also runs in its strict mode
    (tests a subclass adds are left as they are)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("test_") and inspect.iscoroutinefunction(value):
            setattr(cls, name, pytest.mark.asyncio(value))
    return cls


class StoreConformance:
    """Base of the conformance classes. A subclass implements `make_store`; the `store` fixture opens what
    it returns before each test and closes it afterwards."""

    def make_store(self, directory: Path) -> SessionStore:
        """A new, unopened store; `directory` is an empty directory of this test, for stores with files."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_store")

    @pytest_asyncio.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[SessionStore]:
        store = self.make_store(tmp_path)
        await store.open()
        try:
            yield store
        finally:
            await store.close()
