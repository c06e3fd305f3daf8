"""Opaque page tokens. A token records where the previous page ended and a digest of the filters it was
issued for, so reusing it with other filters is an error rather than a silently wrong page."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from general_agent_server.domain.errors import ServiceError, invalid_argument


def filters_digest(filters: Any) -> str:
    return hashlib.sha256(json.dumps(filters, sort_keys=True, default=str).encode()).hexdigest()[:16]


def encode_token(position: dict[str, Any], digest: str) -> str:
    payload = json.dumps({"p": position, "f": digest}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def invalid_token(why: str) -> ServiceError:
    return invalid_argument("page_token", why, reason="INVALID_PAGE_TOKEN")


def decode_token(token: str, digest: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        payload = json.loads(raw)
        position, token_digest = payload["p"], payload["f"]
    except (ValueError, KeyError, TypeError):
        raise invalid_token("malformed") from None
    if token_digest != digest or not isinstance(position, dict):
        raise invalid_token("was issued for other filters")
    return position
