"""Scrubbing of secrets from what leaves the process or is stored (tool results, events, transcript, model
history, event log, hook payloads, logs, errors).

One registry holds every secret value the server knows. Each secret is registered where it is loaded (the
settings, a session's in-memory API key, a hook registration's TLS key), and the sinks apply `redact` at their
boundaries: tool results as they enter a run, every event as it is stamped, the commit path, the hook payload
builder, the JSONL writers and the log formatter. A value shorter than MIN_SECRET_CHARS is not registered:
replacing short strings everywhere would mangle ordinary text and hide nothing worth hiding."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
import threading
import types
import typing
from collections.abc import Iterable
from typing import Any, TypeVar

# Anthropic keys and bearer-looking tokens, even when we were not told the exact value (logs and errors only:
# a tool's output may legitimately hold such text, e.g. a test fixture in the user's repository).
_PATTERNS = (
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)(x-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',]+"),
)
# The memory gateway's credentials and presigned-URL parts (docs/memory.md, "Redaction"), also for logs and
# errors: EverMe tokens keep their first eight characters, which support staff use to tell tokens apart.
_GATEWAY_PATTERNS = (
    (re.compile(r"\b((?:evt|emk)_[A-Za-z0-9]{4})[A-Za-z0-9_\-]{28,}"), r"\1_REDACTED"),
    (re.compile(r"(?i)(X-Amz-(?:Signature|Credential|Security-Token)=)[^&\s\"'<>]+"), r"\1[REDACTED]"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[REDACTED-AWSKEY]"),
)
# A word each of the patterns above cannot match without (lower-cased): `scrub` runs the patterns only on text
# that holds one (tests/unit/test_redaction_markers.py checks every pattern against them).
_PATTERN_MARKERS = ("sk-ant-", "bearer", "x-api-key", "evt_", "emk_", "x-amz-", "akia", "asia")
# What is removed from conversation text before memory stores it (docs/memory.md, "Redaction"): value-shaped
# secrets only, each replaced by a label naming its kind, so the text stays readable; a false positive would
# damage stored knowledge for good, so the bare words ("password", "token") are never matched on their own.
CONTENT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----")),
    ("api_key", re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("slack_token", re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]{10,}")),
    ("aws_key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("everme_token", re.compile(r"\b(?:evt|emk)_[A-Za-z0-9_\-]{8,}")),
    ("bearer", re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/=\-]{10,}")),
    ("aws_signature", re.compile(r"(?i)(?<=X-Amz-Signature=)[^&\s\"'<>]+")),
    ("aws_signature", re.compile(r"(?i)(?<=X-Amz-Credential=)[^&\s\"'<>]+")),
    ("aws_signature", re.compile(r"(?i)(?<=X-Amz-Security-Token=)[^&\s\"'<>]+")),
    ("password", re.compile(r"(?i)(?<=\bpassword=)[^\s\"'&,;]{4,}|(?<=\bpasswd=)[^\s\"'&,;]{4,}")),
    ("password", re.compile(r"(?i)(?<=\"password\": \")[^\"]{4,}(?=\")|(?<=\"password\":\")[^\"]{4,}(?=\")")),
    ("secret", re.compile(r"(?i)(?<=\bsecret=)[^\s\"'&,;]{4,}|(?<=\bclient_secret=)[^\s\"'&,;]{4,}")),
)
REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 8

T = TypeVar("T")


class SecretRegistry:
    """The secret values known to this process. Registration is rare (start-up, a session's key, a hook
    registration); lookups happen on every event, so the values are kept as an immutable tuple swapped under a
    lock, and readers (the event loop, writer threads, log handlers) never lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()

    @property
    def values(self) -> tuple[str, ...]:
        return self._values

    def register(self, value: str | None) -> None:
        """Registers a secret, its lines (a PEM key is re-wrapped by whatever prints it) and its JSON-escaped
        form (how it appears inside a JSON string); values below MIN_SECRET_CHARS are ignored."""
        if not value:
            return
        lines = (line.strip() for line in value.splitlines())
        forms = {value.strip(), *(line for line in lines if not line.startswith("-----"))}  # not PEM armour
        forms |= {json.dumps(form, ensure_ascii=False)[1:-1] for form in forms}
        new = {form for form in forms if len(form) >= MIN_SECRET_CHARS}
        with self._lock:
            if new <= set(self._values):
                return
            # Longest first: a secret that contains another is replaced whole, not around the shorter one.
            self._values = tuple(sorted(new | set(self._values), key=lambda v: (-len(v), v)))


SECRETS = SecretRegistry()


def register_secret(value: str) -> str:
    """Registers a secret where it is loaded and hands it back, so a loader reads `key = register_secret(...)`."""
    SECRETS.register(value)
    return value


def redact_text(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """`text` with every registered secret replaced by [REDACTED]."""
    for secret in SECRETS.values if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact(value: T) -> T:
    """A copy of `value` with every registered secret replaced in every string it holds: strings, lists, tuples,
    dicts and dataclasses (the event, transcript, history and tool-call types) are walked; anything else (bytes
    of an image, numbers, enums, times) is kept. Unchanged parts are returned as they are, not copied."""
    secrets = SECRETS.values
    if not secrets:
        return value
    result: T = _redact(value, secrets)
    return result


def _redact(value: Any, secrets: tuple[str, ...]) -> Any:
    kind = _KINDS.get(type(value)) or _kind_of(type(value))
    if kind is _ATOM:
        return value
    if kind is _TEXT:
        return redact_text(value, secrets)
    if kind is _MAP:
        return _redact_map(value, secrets)
    if kind is _SEQUENCE:
        return _redact_sequence(value, secrets)
    changes = {}
    for name in redaction_plan(type(value)):
        old = getattr(value, name)
        new = _redact(old, secrets)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(value, **changes) if changes else value


def _redact_map(value: dict[Any, Any], secrets: tuple[str, ...]) -> dict[Any, Any]:
    # Copied only from the first changed item on: most maps a commit walks hold no secret, and building a new
    # map per walk would cost an allocation per content block.
    copy: dict[Any, Any] | None = None
    for key, item in value.items():
        new = _redact(item, secrets)
        if copy is not None:
            copy[key] = new
        elif new is not item:
            copy = dict(value)
            copy[key] = new
    return value if copy is None else copy


def _redact_sequence(value: list[Any] | tuple[Any, ...], secrets: tuple[str, ...]) -> list[Any] | tuple[Any, ...]:
    for index, item in enumerate(value):
        new = _redact(item, secrets)
        if new is not item:
            elements = [*value[:index], new, *(_redact(rest, secrets) for rest in value[index + 1 :])]
            return elements if isinstance(value, list) else tuple(elements)
    return value


# What `_redact` does with a value, by its type, decided once per type: the events, records and history walked on
# every commit hold mostly numbers, enums and times, which a dictionary lookup passes over.
_ATOM, _TEXT, _MAP, _SEQUENCE, _DATACLASS = "atom", "text", "map", "sequence", "dataclass"
_KINDS: dict[type, str] = {}


def _kind_of(cls: type) -> str:
    if issubclass(cls, str):
        kind = _TEXT
    elif issubclass(cls, dict):
        kind = _MAP
    elif issubclass(cls, list | tuple):
        kind = _SEQUENCE
    elif dataclasses.is_dataclass(cls):
        kind = _DATACLASS if redaction_plan(cls) else _ATOM  # e.g. a usage record: numbers only
    else:
        kind = _ATOM
    _KINDS[cls] = kind
    return kind


_FIELDS: dict[type, tuple[str, ...]] = {}


def redaction_plan(cls: type) -> tuple[str, ...]:
    """The init fields of a dataclass that can hold text, by their annotations: a field declared a number, a
    time, an enum or bytes (or a union of those) is never walked. A class whose annotations do not resolve has
    every init field walked."""
    names = _FIELDS.get(cls)
    if names is None:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # an annotation naming what the module imports only for type checking
            hints = {}
        fields = [f for f in dataclasses.fields(cls) if f.init]
        _FIELDS[cls] = tuple(f.name for f in fields)  # while it is worked out: a class naming itself walks it
        names = tuple(f.name for f in fields if _may_hold_text(hints.get(f.name, object)))
        _FIELDS[cls] = names
    return names


# Types whose values are never text a secret can sit in (a StrEnum's values are the server's own constants).
_TEXTLESS = (int, float, complex, datetime.date, datetime.time, datetime.timedelta, enum.Enum, bytes, type(None))


def _may_hold_text(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_may_hold_text(arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return False  # constants of the code (an event's kind)
    if isinstance(annotation, type) and origin is None:
        return not issubclass(annotation, _TEXTLESS) and not (
            dataclasses.is_dataclass(annotation) and not redaction_plan(annotation)
        )
    return True  # str, Any, containers, a type variable: walked


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """For logs and error messages: every registered secret, every secret given, and anything shaped like a
    key replaced with [REDACTED]."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = redact_text(text)
    lowered = text.lower()
    if not any(marker in lowered for marker in _PATTERN_MARKERS):
        return text  # every pattern needs one of these words: most log lines hold none
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    for gateway_pattern, replacement in _GATEWAY_PATTERNS:
        text = gateway_pattern.sub(replacement, text)
    return text


def redact_content(text: str) -> tuple[str, tuple[str, ...]]:
    """Conversation text as memory may store it: every registered secret, and every value matching one of
    CONTENT_PATTERNS replaced by `[REDACTED:<kind>]`; also the kinds found (for a count, never the values)."""
    text = redact_text(text)
    found: list[str] = []
    for kind, pattern in CONTENT_PATTERNS:
        text, count = pattern.subn(f"[REDACTED:{kind}]", text)
        if count and kind not in found:
            found.append(kind)
    return text, tuple(found)
