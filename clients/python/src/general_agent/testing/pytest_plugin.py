"""pytest fixtures for a host's tests: ``pytest_plugins = ["general_agent.testing.pytest_plugin"]``.

- ``agent_server``: a real server on a free port with the scripted fake model (see
  :mod:`general_agent.testing.server`), one per test, killed at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from general_agent.testing.server import LocalServer
from general_agent.testing.server import agent_server as _agent_server


@pytest.fixture
def agent_server(tmp_path: Path) -> Iterator[LocalServer]:
    """A started ``general-agent serve`` (state under ``tmp_path``) whose model is ``agent_server.model``."""
    with _agent_server(state_dir=tmp_path / "agent-server") as server:
        yield server
