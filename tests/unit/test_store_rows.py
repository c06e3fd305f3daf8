"""The session row's config documents (store/rows.py) are encoded once per config object and never outlive it:
the cache must not keep an evicted session's config (and its system prompt) in memory, and never keeps a large one.
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime

from general_agent_server.domain import codec
from general_agent_server.domain.session import SessionConfig, SessionIdentity, SessionMode, SessionRecord
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
