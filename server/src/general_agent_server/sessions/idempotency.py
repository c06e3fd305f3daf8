"""Idempotency keys: the one mechanism behind every RPC that takes a `request_id` (docs/protocol.md).

A key is scoped to the tenant and the RPC and kept at least `idempotency_ttl_seconds`. The first request
with a key stores its answer (in the same commit as its effect where it has one); a replay with the same
body gets that answer back and changes nothing; a replay with a different body is INVALID_ARGUMENT
`REQUEST_ID_REUSED`. Callers check and record under the session's lock, so two concurrent requests with one
key apply once. Turns are the exception in storage only: their key lives on the run they started, and a
replay attaches to that run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.errors import ErrorCode, FieldViolation, ServiceError
from general_agent_server.domain.records import IdempotencyRecord
from general_agent_server.store.port import SessionStore, WriteBatch


@dataclass(frozen=True, kw_only=True, slots=True)
class Idempotency:
    """A mutating request's idempotency key and a digest of its body."""

    request_id: str
    body_hash: str


def request_id_reused(request_id: str, **metadata: str) -> ServiceError:
    return ServiceError(
        ErrorCode.INVALID_ARGUMENT,
        "REQUEST_ID_REUSED",
        "request_id was already used with a different request",
        metadata={"request_id": request_id[:64], **metadata},
        field_violations=(FieldViolation("request_id", "was already used with a different request"),),
    )


class IdempotencyKeys:
    """Replays and records the answers of keyed requests."""

    def keyed(self, tenant: str, rpc: str, idem: Idempotency | None) -> KeyedRequest:
        return KeyedRequest(keys=self, tenant=tenant, rpc=rpc, idem=idem)

    def __init__(self, store: SessionStore, *, ttl_seconds: float) -> None:
        self._store = store
        self._ttl = timedelta(seconds=ttl_seconds)

    async def replay(self, tenant: str, rpc: str, idem: Idempotency | None) -> dict[str, Any] | None:
        """The stored answer of an earlier request with this key and body, or None for a new key."""
        if idem is None or not idem.request_id:
            return None
        record = await self._store.get_idempotency(tenant, rpc, idem.request_id)
        if record is None or record.create_time < utcnow() - self._ttl:
            return None
        if record.body_hash != idem.body_hash:
            raise request_id_reused(idem.request_id)
        result: dict[str, Any] = json.loads(record.result_json)
        return result

    @staticmethod
    def record(tenant: str, rpc: str, idem: Idempotency | None, result: dict[str, Any]) -> IdempotencyRecord | None:
        """The row to commit with the request's effect (None without a key)."""
        if idem is None or not idem.request_id:
            return None
        return IdempotencyRecord(
            tenant=tenant,
            rpc=rpc,
            request_id=idem.request_id,
            body_hash=idem.body_hash,
            result_json=json.dumps(result),
            create_time=utcnow(),
        )

    async def remember(
        self, tenant: str, session_id: str, rpc: str, idem: Idempotency | None, result: dict[str, Any]
    ) -> None:
        """Stores the answer of a request whose effect committed without it (or that had none)."""
        record = self.record(tenant, rpc, idem, result)
        if record is not None:
            await self._store.write(WriteBatch(tenant=tenant, session_id=session_id, idempotency=record))


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyedRequest:
    """One request's key, bound to its tenant and RPC: what a session command needs to replay the first
    answer or commit its own with its effect, under the session's command lock."""

    keys: IdempotencyKeys
    tenant: str
    rpc: str
    idem: Idempotency | None

    async def replay(self) -> dict[str, Any] | None:
        return await self.keys.replay(self.tenant, self.rpc, self.idem)

    def record(self, result: dict[str, Any]) -> IdempotencyRecord | None:
        return self.keys.record(self.tenant, self.rpc, self.idem, result)

    async def remember(self, session_id: str, result: dict[str, Any]) -> None:
        await self.keys.remember(self.tenant, session_id, self.rpc, self.idem, result)
