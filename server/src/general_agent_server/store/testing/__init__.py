"""The SessionStore conformance suite, shipped with the package so any implementation can prove itself.

Requirements: pytest and pytest-asyncio (`pip install 'general-agent-server[testing]'`). The suite's tests
carry the asyncio mark themselves, so it runs in pytest-asyncio's strict and auto modes alike.

Use: subclass `SessionStoreConformance` (every protocol of `store.port.SessionStore`), or only the classes
of the protocols a store implements, in a `test_*.py` module, and implement `make_store`, which returns a
new, unopened store; the suite's `store` fixture opens it before each test and closes it afterwards:

    class TestMyStore(SessionStoreConformance):
        def make_store(self, directory: Path) -> SessionStore:
            return MyStore(directory / "state")

Each test works in tenants of its own (random names), so the suite also runs against a store shared
between tests (e.g. one PostgreSQL database) as long as the store starts empty of those tenants.

`factories` builds records (`make_session`, `make_event`, ...) and `helpers` reads and writes in bulk;
other tests may use both.
"""

from __future__ import annotations

from general_agent_server.store.testing.base import StoreConformance
from general_agent_server.store.testing.checkpoints import CheckpointConformance
from general_agent_server.store.testing.commands import CommandConformance
from general_agent_server.store.testing.hooks import HookRegistrationConformance
from general_agent_server.store.testing.idempotency import IdempotencyConformance
from general_agent_server.store.testing.leases import LeaseConformance
from general_agent_server.store.testing.lifecycle import StoreLifecycleConformance
from general_agent_server.store.testing.log import SessionLogConformance
from general_agent_server.store.testing.runs import RunStoreConformance
from general_agent_server.store.testing.session_pages import SessionPagesConformance
from general_agent_server.store.testing.sessions import SessionRecordsConformance
from general_agent_server.store.testing.writes import BatchWriterConformance


class SessionStoreConformance(
    StoreLifecycleConformance,
    SessionRecordsConformance,
    SessionPagesConformance,
    BatchWriterConformance,
    SessionLogConformance,
    RunStoreConformance,
    HookRegistrationConformance,
    IdempotencyConformance,
    LeaseConformance,
    CommandConformance,
    CheckpointConformance,
):
    """Every test a full SessionStore must pass."""


__all__ = [
    "BatchWriterConformance",
    "CheckpointConformance",
    "CommandConformance",
    "HookRegistrationConformance",
    "IdempotencyConformance",
    "LeaseConformance",
    "RunStoreConformance",
    "SessionLogConformance",
    "SessionPagesConformance",
    "SessionRecordsConformance",
    "SessionStoreConformance",
    "StoreConformance",
    "StoreLifecycleConformance",
]
