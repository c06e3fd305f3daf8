"""How records map to rows in both durable stores (the SQL differs per store, the columns do not): timestamps as
integer microseconds, the session row (its queryable columns plus JSON documents) and the rows of the
transcript, event log, idempotency and checkpoint reads, each taken in its SELECT's column order."""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

from pydantic import ConfigDict, Field, TypeAdapter

from general_agent_server.domain import codec
from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.domain.records import IdempotencyRecord
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
from general_agent_server.domain.transcript import TranscriptEntry
from general_agent_server.store.port import CommandStatus, SessionCommand
from general_agent_server.workspace.checkpoints.files import CheckpointFile
from general_agent_server.workspace.checkpoints.recorder import Checkpoint, CheckpointInfo


class Row(Protocol):
    """A row as both drivers return it (sqlite3.Row, asyncpg.Record, tuple): read by column position."""

    def __getitem__(self, index: int, /) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...


def to_us(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def now_us() -> int:
    return to_us(datetime.now(UTC))


def from_us(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1_000_000, tz=UTC)


# A session's config lives in a table of its own (session_configs): a step rewrites the session's row, and a
# config in that row (a long system prompt, hosted tool schemas) would be rewritten with it, every page of it.
SESSION_SELECT = (
    "SELECT tenant, session_id, session_key, mode, parent_session_id, state, session_configs.config_json,"
    " runtime_json, last_sequence, sequence_reserved, history_message_count, create_time_us, update_time_us, version"
    " FROM sessions JOIN session_configs USING (tenant, session_id)"
)


# A session's config JSON documents, by the config's identity: a config is frozen and replaced whole when it changes,
# and every commit of a session rewrites its row, so most commits find their config here. An entry lives as long as
# its config (a weak reference whose callback drops it, before the id can be reused), so the cache never keeps a
# config, or its system prompt, alive. Read and written from the writer threads too (dict operations are atomic; a
# race only encodes twice). A large config's JSON (a long system prompt) is not kept, only its labels': keeping it
# as long as the session lives would double what the session holds, and a step that leaves the config as it was
# does not write it (WriteBatch.config_unchanged).
_CONFIG_DOCUMENTS: dict[int, tuple[weakref.ref[SessionConfig], str | None, str]] = {}
_CONFIG_DOCUMENTS_MAX_CHARS = 16 * 1024


def _kept(config: SessionConfig) -> tuple[str | None, str] | None:
    """(`config_json`, `labels_json`) kept for the config, `config_json` None for a large config; None if none."""
    kept = _CONFIG_DOCUMENTS.get(id(config))
    return (kept[1], kept[2]) if kept is not None and kept[0]() is config else None


def _keep(config: SessionConfig, encoded: str) -> tuple[str | None, str]:
    key = id(config)
    config_json = encoded if len(encoded) <= _CONFIG_DOCUMENTS_MAX_CHARS else None
    labels_json = json.dumps(dict(config.labels), sort_keys=True)
    _CONFIG_DOCUMENTS[key] = (weakref.ref(config, lambda _: _CONFIG_DOCUMENTS.pop(key, None)), config_json, labels_json)
    return config_json, labels_json


def config_document(record: SessionRecord) -> str:
    """The session_configs row's `config_json`."""
    kept = _kept(record.config)
    if kept is not None and kept[0] is not None:
        return kept[0]
    encoded = codec.SESSION_CONFIG.dumps(record.config)
    if kept is None:
        _keep(record.config, encoded)
    return encoded


@dataclass(frozen=True, slots=True)
class _Runtime:
    """The session row's `runtime_json` document, written and read in one pass. Every field has a default, so a
    document written before a field existed still reads."""

    __pydantic_config__ = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")  # pending images' bytes

    active_run_id: str = ""
    pending_call_ids: tuple[str, ...] = ()
    stop_requested: bool = False
    usage_snapshot: UsageSnapshot | None = None
    cumulative_usage: Usage | None = None
    forked_from: ForkOrigin | None = None
    pending_injections: tuple[tuple[Annotated[ContentPart, Field(discriminator="kind")], ...], ...] = ()
    last_compaction_us: int | None = None
    approved_tools: tuple[str, ...] = ()


_RUNTIME = TypeAdapter(_Runtime)


def session_columns(record: SessionRecord) -> tuple[Any, ...]:
    """The sessions columns from tenant to version, in table order (config_json, which stays empty since the config
    moved to session_configs, and create_time_us excluded)."""
    runtime = _Runtime(
        record.active_run_id,
        record.pending_call_ids,
        record.stop_requested,
        record.usage_snapshot,
        record.cumulative_usage,
        record.forked_from,
        record.pending_injections,
        to_us(record.last_compaction_time) if record.last_compaction_time else None,
        record.approved_tools,
    )
    kept = _kept(record.config) or _keep(record.config, codec.SESSION_CONFIG.dumps(record.config))
    labels_json = kept[1]
    return (
        record.tenant,
        record.session_id,
        record.identity.session_key,
        record.identity.mode.value,
        record.parent_session_id,
        record.state.value,
        labels_json,
        _RUNTIME.dump_json(runtime).decode(),
        record.last_sequence,
        record.sequence_reserved,
        record.history_message_count,
        to_us(record.update_time),
        record.version,
    )


def record_from_row(row: Row) -> SessionRecord:
    """A SessionRecord from a row of SESSION_SELECT."""
    (
        tenant,
        session_id,
        session_key,
        mode,
        parent,
        state,
        config_json,
        runtime_json,
        last_sequence,
        sequence_reserved,
        history_count,
        create_us,
        update_us,
        version,
    ) = row
    runtime = _RUNTIME.validate_json(runtime_json)
    return SessionRecord(
        tenant=tenant,
        identity=SessionIdentity(mode=SessionMode(mode), session_id=session_id, session_key=session_key),
        config=codec.SESSION_CONFIG.loads(config_json),
        create_time=from_us(create_us),
        update_time=from_us(update_us),
        parent_session_id=parent,
        forked_from=runtime.forked_from,
        state=SessionState(state),
        active_run_id=runtime.active_run_id,
        pending_call_ids=runtime.pending_call_ids,
        stop_requested=runtime.stop_requested,
        usage_snapshot=runtime.usage_snapshot,
        cumulative_usage=runtime.cumulative_usage or Usage(),
        last_sequence=last_sequence,
        sequence_reserved=sequence_reserved,
        history_message_count=history_count,
        version=version,
        pending_injections=runtime.pending_injections,
        last_compaction_time=from_us(runtime.last_compaction_us) if runtime.last_compaction_us else None,
        approved_tools=runtime.approved_tools,
    )


TRANSCRIPT_SELECT = "SELECT entry_id, sequence, run_id, timestamp_us, entry_json FROM transcript"


def transcript_entries(rows: Iterable[Row]) -> list[TranscriptEntry]:
    """Transcript entries from rows of TRANSCRIPT_SELECT."""
    return [
        TranscriptEntry(
            entry_id=r[0], sequence=r[1], run_id=r[2], timestamp=from_us(r[3]), body=codec.TRANSCRIPT_BODY.loads(r[4])
        )
        for r in rows
    ]


EVENT_SELECT = "SELECT sequence, run_id, create_time_us, body_json FROM events"


def sequenced_events(session_id: str, rows: Iterable[Row]) -> list[SequencedEvent]:
    """The session's events from rows of EVENT_SELECT."""
    return [
        SequencedEvent(
            sequence=r[0],
            session_id=session_id,
            run_id=r[1],
            create_time=from_us(r[2]),
            body=codec.EVENT_BODY.loads(r[3]),
        )
        for r in rows
    ]


IDEMPOTENCY_SELECT = "SELECT body_hash, result_json, create_time_us FROM idempotency"


def idempotency_record(tenant: str, rpc: str, request_id: str, row: Row | None) -> IdempotencyRecord | None:
    """The record from a row of IDEMPOTENCY_SELECT; None for no row."""
    if row is None:
        return None
    return IdempotencyRecord(
        tenant=tenant,
        rpc=rpc,
        request_id=request_id,
        body_hash=row[0],
        result_json=row[1],
        create_time=from_us(row[2]),
    )


CHECKPOINT_INFO_SELECT = (
    "SELECT position, checkpoint_id, run_id, call_id, tool_name, create_time_us, paths_json, stored_bytes"
    " FROM checkpoints"
)


def checkpoint_infos(rows: Iterable[Row]) -> list[CheckpointInfo]:
    """Checkpoint headers from rows of CHECKPOINT_INFO_SELECT."""
    return [
        CheckpointInfo(
            position=r[0],
            checkpoint_id=r[1],
            run_id=r[2],
            call_id=r[3],
            tool_name=r[4],
            created_at=from_us(r[5]),
            paths=tuple(json.loads(r[6])),
            stored_bytes=r[7],
        )
        for r in rows
    ]


# The checkpoints LEFT JOIN checkpoint_files read, newest checkpoint first and each one's files in order.
CHECKPOINT_CHAIN_SELECT = (
    "SELECT c.checkpoint_id, c.run_id, c.call_id, c.tool_name, c.create_time_us, f.path, f.existed_before, f.content"
    " FROM checkpoints c LEFT JOIN checkpoint_files f"
    " ON f.tenant=c.tenant AND f.session_id=c.session_id AND f.checkpoint_id=c.checkpoint_id"
)


def checkpoint_chain(rows: Iterable[Row]) -> list[Checkpoint]:
    """Checkpoints with their files from rows of CHECKPOINT_CHAIN_SELECT (a checkpoint without files has one
    row whose file columns are NULL)."""
    headers: dict[str, tuple[Any, ...]] = {}
    files: dict[str, list[CheckpointFile]] = {}
    for r in rows:
        headers.setdefault(r[0], (r[0], r[1], r[2], r[3], r[4]))
        bucket = files.setdefault(r[0], [])
        if r[5] is not None:
            bucket.append(CheckpointFile(path=r[5], existed_before=bool(r[6]), prior_content=bytes(r[7])))
    return [
        Checkpoint(
            checkpoint_id=cid,
            run_id=run_id,
            call_id=call_id,
            tool_name=tool_name,
            created_at=from_us(create_us),
            files=tuple(files[cid]),
        )
        for cid, (_, run_id, call_id, tool_name, create_us) in headers.items()
    ]


def command_from_row(tenant: str, command_id: str, row: Row) -> SessionCommand:
    """A relayed command from its row: session_id, status, body_json, result_json."""
    return SessionCommand(
        tenant=tenant,
        session_id=row[0],
        command_id=command_id,
        status=CommandStatus(row[1]),
        body_json=row[2],
        result_json=row[3],
    )
