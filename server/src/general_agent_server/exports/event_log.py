"""The optional raw event log: `query_started` for every run admitted, then every event, as
JSONL at the server-chosen path `<state_dir>/events/<tenant>/<session_id>.jsonl`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from general_agent_server.domain import codec
from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.events import SequencedEvent
from general_agent_server.exports.jsonl_files import JsonlFiles


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class EventLog(JsonlFiles):
    def __init__(self, root: Path) -> None:
        super().__init__(root, name="event-log")

    def query_started(self, tenant: str, session_id: str, run_id: str, parts: Sequence[ContentPart]) -> None:
        line = {
            "type": "query_started",
            "runId": run_id,
            "timestamp": int(utcnow().timestamp() * 1000),
            "input": codec.CONTENT_PARTS.to_jsonable(tuple(parts)),
        }
        self.append_lines(tenant, session_id, [_line(line)])

    def events(self, tenant: str, session_id: str, events: Sequence[SequencedEvent]) -> None:
        lines = []
        for event in events:
            body = codec.EVENT_BODY.to_jsonable(event.body)
            line = {
                "type": body.pop("kind"),
                "sequence": event.sequence,
                "runId": event.run_id,
                "timestamp": int(event.create_time.timestamp() * 1000),
                **body,
            }
            lines.append(_line(line))
        self.append_lines(tenant, session_id, lines)
