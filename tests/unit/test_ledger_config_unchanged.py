"""A step tells the store when the session's config is the one stored with the version it replaces
(WriteBatch.config_unchanged), so a durable store leaves the config's row alone instead of encoding and comparing
a long system prompt at every step; a step that changes the config, and the first step after a reload, say so
only when it is true."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from general_agent_server.domain.session import SessionState
from general_agent_server.store.memory import InMemorySessionStore
from general_agent_server.store.port import WriteBatch
from general_agent_server.store.testing.factories import make_session
from tests.support.ledgers import make_ledger


class RecordingStore(InMemorySessionStore):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[WriteBatch] = []

    async def write(self, batch: WriteBatch, *, durable: bool = True) -> None:
        self.batches.append(batch)
        await super().write(batch, durable=durable)


async def test_the_flag_is_set_exactly_when_the_step_keeps_the_stored_config(tmp_path: Path) -> None:
    store = RecordingStore()
    await store.open()
    record = make_session("t", "s")
    await store.create_session(record)
    book = make_ledger(tmp_path, record, store)
    await book.commit(state=SessionState.RUNNING)
    await book.commit(config=replace(record.config, system_prompt="longer"))
    await book.commit(state=SessionState.IDLE)
    # Read again (another replica's step): an equal config read from the store is the stored one.
    stored = await store.get_session("t", "s")
    assert stored is not None
    book.reload(stored, [])
    await book.commit(state=SessionState.RUNNING)
    assert [batch.config_unchanged for batch in store.batches] == [True, False, True, True]
    final = await store.get_session("t", "s")
    assert final is not None
    assert final.config.system_prompt == "longer"
