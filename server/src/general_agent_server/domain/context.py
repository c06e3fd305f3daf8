"""Who is calling, and what a session looks like to callers."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from general_agent_server.domain.session import DEFAULT_TENANT, SessionRecord


class CallerRole(enum.StrEnum):
    """What a caller may make the server do. An `admin` is the operator: its hook targets (and MCP URLs) may be
    loopback or private hosts, its own sidecars. A `tenant` is a customer of a shared server: what it registers
    passes the SSRF guard. Without authentication every caller is the operator, since the server then listens on
    loopback (or behind --insecure-listen, on the operator's say-so)."""

    ADMIN = "admin"
    TENANT = "tenant"


@dataclass(frozen=True, kw_only=True, slots=True)
class CallContext:
    """Who is calling (the tenant scopes every id, the role decides what is trusted) and the correlation id for
    logs."""

    tenant: str = DEFAULT_TENANT
    role: CallerRole = CallerRole.ADMIN
    request_id: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionView:
    """A session as an RPC answers it: its record and where its transcript is exported."""

    record: SessionRecord
    transcript_path: str
