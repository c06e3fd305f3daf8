"""The session row's config documents (store/rows.py) are encoded once per config object and never outlive it:
the cache must not keep an evicted session's config (and its system prompt) in memory, and never keeps a large one.
"""

from __future__ import annotations

import gc
import json
from dataclasses import replace
from datetime import UTC, datetime

from general_agent_server.domain import codec
from general_agent_server.domain.content import ImagePart, TextPart
from general_agent_server.domain.session import (
    ForkOrigin,
    SessionConfig,
    SessionIdentity,
    SessionMode,
    SessionRecord,
    SessionState,
    Usage,
    UsageSnapshot,
)
from general_agent_server.store import rows


def _record(config: SessionConfig) -> SessionRecord:
    now = datetime.now(UTC)
    return SessionRecord(
        tenant="t",
        identity=SessionIdentity(mode=SessionMode.GENERAL, session_id="s", session_key=""),
        config=config,
        create_time=now,
        update_time=now,
    )


def test_a_config_is_encoded_once_and_its_entry_goes_with_it() -> None:
    config = SessionConfig(system_prompt="Be brief.", labels={"team": "a"})
    first = rows.config_document(_record(config))
    key = id(config)
    assert rows._CONFIG_DOCUMENTS[key][1] == codec.SESSION_CONFIG.dumps(config) == first
    assert rows.config_document(_record(config)) is first  # the kept string, not a new encoding
    assert rows.session_columns(_record(config))[6] == '{"team": "a"}'  # labels_json
    del config
    gc.collect()
    assert key not in rows._CONFIG_DOCUMENTS


def test_a_large_configs_json_is_not_kept_but_its_labels_are() -> None:
    config = SessionConfig(system_prompt="p" * (rows._CONFIG_DOCUMENTS_MAX_CHARS + 1), labels={"team": "a"})
    assert rows.config_document(_record(config)) == codec.SESSION_CONFIG.dumps(config)
    assert rows._CONFIG_DOCUMENTS[id(config)][1:] == (None, '{"team": "a"}')
    assert rows.session_columns(_record(config))[6] == '{"team": "a"}'  # read from the entry, no encoding


def test_every_runtime_field_reads_back_as_written() -> None:
    """The runtime document (one encoding of the record's run state) holds every field `record_from_row` reads,
    image bytes of a pending injection included."""
    now = datetime.now(UTC).replace(microsecond=123456)
    record = replace(
        _record(SessionConfig(labels={"team": "a"})),
        active_run_id="run-1",
        pending_call_ids=("call-1", "call-2"),
        stop_requested=True,
        usage_snapshot=UsageSnapshot(used_input_tokens=10, context_window=200, used_pct=5.0, capture_time=now),
        cumulative_usage=Usage(input_tokens=3, output_tokens=4, cache_read_input_tokens=5, model_calls=2),
        forked_from=ForkOrigin(session_id="parent", at_sequence=7),
        pending_injections=((TextPart(text="steer"), ImagePart(mime_type="image/png", data=b"\x89PNG\x00\xff")),),
        last_compaction_time=now,
        approved_tools=("bash",),
        state=SessionState.RUNNING,
        last_sequence=9,
        sequence_reserved=64,
        history_message_count=3,
        version=4,
    )
    columns = rows.session_columns(record)
    config_json = rows.config_document(record)
    row = (*columns[:6], config_json, *columns[7:11], rows.to_us(record.create_time), *columns[11:])
    assert rows.record_from_row(row) == record


def test_a_runtime_document_of_an_older_server_still_reads() -> None:
    """Written by `json.dumps` before `last_compaction_us` and `approved_tools` existed: the missing fields take
    their defaults."""
    record = _record(SessionConfig())
    columns = rows.session_columns(record)
    old = json.dumps(
        {
            "active_run_id": "run-1",
            "pending_call_ids": ["call-1"],
            "stop_requested": False,
            "usage_snapshot": None,
            "cumulative_usage": {
                "input_tokens": 3,
                "output_tokens": 4,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
                "model_calls": 1,
            },
            "forked_from": {"session_id": "parent", "at_sequence": 2},
            "pending_injections": [[{"kind": "text", "text": "steer"}]],
        }
    )
    row = (
        *columns[:6],
        rows.config_document(record),
        old,
        *columns[8:11],
        rows.to_us(record.create_time),
        *columns[11:],
    )
    read = rows.record_from_row(row)
    assert read == replace(
        record,
        active_run_id="run-1",
        pending_call_ids=("call-1",),
        cumulative_usage=Usage(input_tokens=3, output_tokens=4, model_calls=1),
        forked_from=ForkOrigin(session_id="parent", at_sequence=2),
        pending_injections=((TextPart(text="steer"),),),
    )
