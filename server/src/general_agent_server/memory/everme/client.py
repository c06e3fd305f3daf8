"""The EverMe gateway's HTTP transport (docs/memory.md, "The EverMe backend"), over httpx.

Every request carries `Authorization: Bearer <token>` and a fresh UUID in a `requestId` header, which the
gateway reuses in its logs; the id is on every answer and every failure. Answers are the envelope
`{error, requestId, status, result}`: `status` 0 is success, anything else a typed failure (envelope codes
30000-30299 except 30104, or a non-JSON 401/403, are auth failures). A request that times out (the body read
included) is a `timeout` failure and is never retried. A transport failure before any answer is retried once
for GET and HEAD only: a POST may have been applied by the gateway after its answer was lost, so it is never
sent again here, and one whose body may have reached the gateway is marked ambiguous for the outbox."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

import general_agent_server
from general_agent_server.memory.everme.config import EverMeConfig, routed_base
from general_agent_server.memory.types import FailureKind, MemoryFailure

logger = logging.getLogger(__name__)
DEFAULT_TIMEOUT = 30.0
RETRY_DELAY = 0.15
_IDEMPOTENT = frozenset({"GET", "HEAD"})
_BODY_PREVIEW = 200


@dataclass(frozen=True, slots=True)
class Reply:
    result: Any
    request_id: str


def _is_auth(code: int | None, http_status: int) -> bool:
    if code is not None and 30000 <= code <= 30299 and code != 30104:
        return True
    return code is None and http_status in (401, 403)


class EverMeClient:
    def __init__(
        self,
        config: EverMeConfig,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self._timeout = timeout
        # trust_env off: an ambient proxy must not see the bearer token, and the device route stays exact.
        self._http = httpx.AsyncClient(
            transport=transport, trust_env=False, follow_redirects=False, limits=httpx.Limits(max_connections=10)
        )

    def _headers(self, request_id: str) -> dict[str, str]:
        agent = self.config.agent_id or "-"
        return {
            "Authorization": f"Bearer {self.config.token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"general-agent-memory/{general_agent_server.__version__} (agentId={agent})",
            "requestId": request_id,
        }

    async def call(self, method: str, path: str, body: Any = None, *, seconds: float | None = None) -> Reply:
        """The envelope's `result`, or a MemoryFailure carrying this request's id."""
        if not self.config.token:
            raise MemoryFailure(FailureKind.CONFIG, "no EverMe credential (EVERME_AGENT_TOKEN or EVERME_API_KEY)")
        request_id = str(uuid.uuid4())
        url = routed_base(self.config) + path
        # A caller under a deadline (recall) passes what is left of it; the request never outlives that.
        seconds = self._timeout if seconds is None else max(min(seconds, self._timeout), 0.05)
        attempts = 2 if method in _IDEMPOTENT else 1
        started = time.perf_counter()
        for attempt in range(attempts):
            try:
                response = await self._http.request(
                    method,
                    url,
                    json=body if method not in _IDEMPOTENT else None,
                    headers=self._headers(request_id),
                    timeout=httpx.Timeout(seconds),
                )
            except httpx.TimeoutException as exc:
                sent = not isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout)
                self._log(method, path, 0, request_id, started)
                raise MemoryFailure(
                    FailureKind.TIMEOUT,
                    f"EverMe {path} timed out after {seconds:g}s",
                    request_id=request_id,
                    ambiguous=sent and method not in _IDEMPOTENT,
                ) from None
            except httpx.TransportError as exc:
                if attempt + 1 < attempts:
                    await asyncio.sleep(RETRY_DELAY)
                    continue
                self._log(method, path, 0, request_id, started)
                raise MemoryFailure(
                    FailureKind.NETWORK,
                    f"EverMe {path}: {type(exc).__name__}: {exc}",
                    request_id=request_id,
                    ambiguous=method not in _IDEMPOTENT and not isinstance(exc, httpx.ConnectError),
                ) from None
            self._log(method, path, response.status_code, request_id, started)
            return self._envelope(path, response, request_id)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @staticmethod
    def _log(method: str, path: str, status: int, request_id: str, started: float) -> None:
        # Never headers or bodies: the method, the path, the status, the request id and the time only.
        logger.debug(
            "everme %s %s -> %s requestId=%s %.1fms",
            method,
            path,
            status or "no answer",
            request_id,
            (time.perf_counter() - started) * 1000,
            extra={"category": "system"},
        )

    @staticmethod
    def _envelope(path: str, response: httpx.Response, request_id: str) -> Reply:
        http_status = response.status_code
        try:
            envelope = response.json()
        except ValueError:
            envelope = None
        if not isinstance(envelope, dict):
            preview = response.text[:_BODY_PREVIEW].strip()
            kind = FailureKind.AUTH if http_status in (401, 403) else FailureKind.UPSTREAM
            raise MemoryFailure(
                kind, f"EverMe {path}: HTTP {http_status} — {preview}", http_status=http_status, request_id=request_id
            )
        answered_id = str(envelope.get("requestId") or response.headers.get("requestId") or request_id)
        status = envelope.get("status")
        if status == 0 and not isinstance(status, bool):
            return Reply(result=envelope.get("result"), request_id=answered_id)
        code = status if isinstance(status, int) and not isinstance(status, bool) else None
        message = str(envelope.get("error") or f"HTTP {http_status}")
        if _is_auth(code, http_status):
            kind = FailureKind.AUTH
        elif http_status in (400, 413, 422):
            kind = FailureKind.INVALID
        else:
            kind = FailureKind.UPSTREAM
        raise MemoryFailure(
            kind, f"EverMe {path}: {message}", http_status=http_status, code=code, request_id=answered_id
        )

    async def aclose(self) -> None:
        await self._http.aclose()
