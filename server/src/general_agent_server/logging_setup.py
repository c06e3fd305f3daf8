"""Structured JSON logs (spec 8.2): one object per line with `category`, `tenant`, `session_id`,
`run_id` and `request_id` when known. Messages pass through the secret scrubber."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

from general_agent_server.core.redaction import redact_text, scrub
from general_agent_server.rpc.interceptors import current_request_id

_FIELDS = ("category", "tenant", "session_id", "run_id", "rpc", "code")


class JsonFormatter(logging.Formatter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub(record.getMessage(), self._secrets),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value:
                line[name] = value
        request_id = current_request_id()
        if request_id:
            line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = scrub(self.formatException(record.exc_info), self._secrets)
        return redact_text(json.dumps(line, ensure_ascii=False))  # every field, not only the message


class ScrubbingTextFormatter(logging.Formatter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record), self._secrets)


def configure_logging(*, level: str, fmt: str, secrets: Iterable[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets) if fmt == "json" else ScrubbingTextFormatter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The SDKs log request details at DEBUG (headers included); keep them quiet unless asked.
    for noisy in ("httpx", "httpx2", "anthropic", "aiosqlite", "grpc"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
