"""Scrubbing of secrets from text that leaves the process (errors, logs, events)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Anthropic keys and bearer-looking tokens, even when we were not told the exact value.
_PATTERNS = (
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)(x-api-key[\"']?\s*[:=]\s*[\"']?)[^\s\"',]+"),
)
REDACTED = "[REDACTED]"


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Replaces every known secret and anything shaped like a key with [REDACTED]."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    return text
