"""A SessionLedger on its own (no live session around it), for tests of what it stores and publishes."""

from __future__ import annotations

from pathlib import Path

from general_agent_server.domain.session import SessionRecord
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.sessions.ledger import LedgerSettings, SessionLedger
from general_agent_server.store.memory import InMemorySessionStore
from general_agent_server.store.port import SessionStore


def make_ledger(tmp_path: Path, record: SessionRecord, store: SessionStore | None = None) -> SessionLedger:
    settings = LedgerSettings(
        sequence_block=4096,
        subscriber_buffer=100,
        replica_id="replica-a",
        lease_ttl_seconds=30,
        event_retention_count=0,
        event_retention_seconds=0,
    )
    return SessionLedger(
        record=record,
        history=[],
        store=store or InMemorySessionStore(),
        exporter=TranscriptExporter(tmp_path),
        event_log=None,
        settings=settings,
    )
