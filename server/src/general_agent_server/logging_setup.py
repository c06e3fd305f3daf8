"""Structured JSON logs: one object per line with `category`, `tenant`, `session_id`, `run_id` and
`request_id` when known (the ids of the run a line is logged in when the line names none), plus the
fields of session lines (sessions/session_log.py). Messages pass through the secret scrubber."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

from general_agent_server.api.auth_interceptor import current_caller
from general_agent_server.api.interceptors import current_request_id
from general_agent_server.security.redaction import redact_text, scrub
from general_agent_server.sessions.session_log import run_ids

_FIELDS = ("category", "tenant", "session_id", "run_id", "rpc", "code")
_IDS = ("tenant", "session_id", "run_id")
_FREE_TEXT = ("body", "error")


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
        line.setdefault("category", "system")  # a line nothing else categorises is the server's own
        if "session_id" not in line and (bound := run_ids()) is not None:
            line.update((k, v) for k, v in zip(_IDS, bound, strict=True) if v)
        data = getattr(record, "data", None)
        if data:
            line.update((k, v) for k, v in data.items() if k not in line)
            for name in _FREE_TEXT:  # redacted at the source; here also of the keys this process knows
                if isinstance(line.get(name), str):
                    line[name] = scrub(str(line[name]), self._secrets)
        request_id = current_request_id()
        if request_id:
            line["request_id"] = request_id
        caller = current_caller()
        if caller.principal:  # an authenticated call: its tenant, and which token or certificate (never the token)
            line.setdefault("tenant", caller.tenant)
            line["principal"] = caller.principal
        if record.exc_info:
            line["exception"] = scrub(self.formatException(record.exc_info), self._secrets)
        return redact_text(json.dumps(line, ensure_ascii=False))  # every field, not only the message


class ScrubbingTextFormatter(logging.Formatter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        data = getattr(record, "data", None)
        if data:
            text += " " + " ".join(f"{k}={v!r}" for k, v in data.items())
        return scrub(text, self._secrets)


def configure_logging(*, level: str, fmt: str, secrets: Iterable[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets) if fmt == "json" else ScrubbingTextFormatter(secrets))
    # No formatter here prints where a line was logged from, nor its thread or process: not computing them for
    # every record saves about a fifth of a line's cost (the logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The SDKs log request details at DEBUG (headers included); keep them quiet unless asked.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "anthropic", "aiosqlite", "grpc"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
