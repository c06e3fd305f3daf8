"""A server that cannot start releases what it opened before the failing step (the store's writer thread,
the model client, the port) and raises, instead of lingering half-started."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropic
from general_agent_server.api.transport import ListenError
from general_agent_server.app import start_server
from general_agent_server.config import load_settings
from tests.conftest import TEST_API_KEY, ServerFactory


async def test_a_failed_start_leaves_no_thread_behind(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    running = await server_factory()
    before = {t.ident for t in threading.enumerate()}
    settings = load_settings(
        None,
        {
            "ANTHROPIC_API_KEY": TEST_API_KEY,
            "ANTHROPIC_BASE_URL": fake_model.base_url,
            # The port the first server holds: binding fails after the store has opened.
            "GENERAL_AGENT_LISTEN": running.address,
            "GENERAL_AGENT_STATE_DIR": str(tmp_path / "second"),
        },
    )
    with pytest.raises(ListenError, match=r"^listen: cannot bind .*: Address already in use$"):
        await start_server(settings)
    # The event loop's default executor (threads named asyncio_N) belongs to the test's loop, which shuts it down
    # when it closes; start-up uses it for a mkdir, and under load it may add a thread for that.
    started = [t for t in threading.enumerate() if t.ident not in before and not t.name.startswith("asyncio_")]
    for thread in started:  # an executor's thread ends once it sees its shutdown
        thread.join(timeout=5)
    assert [t.name for t in started if t.is_alive()] == []
