"""A fake EverMe gateway of our own (aiohttp on a loopback address, port 0) for the EverMe backend's tests.

It speaks the gateway's contract as docs/memory.md describes it: `POST /api/v1/mem/search`, `/mem/context` and
`/mem/agent-memory` behind `Authorization: Bearer`, answering the `{error, requestId, status, result}`
envelope and echoing the `requestId` header. It stores the agent-memory messages per token and searches them
by shared words, and records every request (headers and body) so a test can assert what reached it and what
did not. `fail(path, *modes)` makes the next requests to a path answer otherwise: an envelope error, an HTML
502, a stall (no answer, or headers and then a stalled body) or a dropped connection."""

from __future__ import annotations

import json
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

from tests.support.loopback_http import LoopbackHttp

PREFIX = "/api/v1"
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def _words(text: str) -> set[str]:
    """Words, and the two-character pieces of CJK runs (CJK text has no spaces between words)."""
    words = {w.lower() for w in _WORD.findall(text)}
    for run in _CJK.findall(text):
        words |= {run[i : i + 2] for i in range(len(run) - 1)}
    return words


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Mode:
    """How to answer one request instead of normally."""

    kind: str  # "envelope" | "html" | "stall" | "stall_body" | "drop" | "after" (answer, then stall the caller)
    status: int = 0
    http: int = 200
    error: str = ""


def envelope_error(status: int, error: str = "failed", http: int = 200) -> Mode:
    return Mode("envelope", status=status, http=http, error=error)


HTML_502 = Mode("html", http=502)
STALL = Mode("stall")
STALL_BODY = Mode("stall_body")
DROP = Mode("drop")
NO_STATUS = Mode("no_status")


@dataclass
class FakeEverMe(LoopbackHttp):
    client_max_size: ClassVar[int] = 64 * 1024 * 1024
    handler_cancellation: ClassVar[bool] = True
    host: str = "127.0.0.1"
    tokens: frozenset[str] = frozenset()
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    profile: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._modes: dict[str, deque[Mode]] = defaultdict(deque)
        self._stored: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def fail(self, path: str, *modes: Mode) -> None:
        """The next requests to `path` (e.g. "/mem/search") answer by `modes`, one each, in order."""
        self._modes[path].extend(modes)

    def calls(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == PREFIX + path]

    def stored(self, token: str) -> list[dict[str, Any]]:
        return list(self._stored[token])

    # ------------------------------------------------------------------ serving
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Recorded(request.method, request.path, dict(request.headers), body))
        path = request.path.removeprefix(PREFIX)
        request_id = request.headers.get("requestId", "")
        modes = self._modes.get(path)
        if modes:
            return await self._misbehave(request, modes.popleft(), request_id)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.tokens and token not in self.tokens:
            return self._envelope(request_id, status=30001, error="invalid token", http=401)
        payload = json.loads(body) if body else {}
        if path == "/mem/search":
            return self._envelope(request_id, result=self._search(token, payload))
        if path == "/mem/context":
            return self._envelope(request_id, result={"profile": self.profile, "cachedAt": 0, "generatedAt": 0})
        if path == "/mem/agent-memory":
            messages = payload.get("messages", [])
            for message in messages:
                self._stored[token].append({**message, "conversationId": payload.get("conversationId")})
            status = "extracted" if payload.get("flush") else "accumulated"
            return self._envelope(
                request_id,
                result={"status": status, "messageCount": len(messages), "flushed": bool(payload.get("flush"))},
            )
        return self._envelope(request_id, result={"ok": True})

    def _search(self, token: str, payload: dict[str, Any]) -> dict[str, Any]:
        words = _words(str(payload.get("query", "")))
        raw = []
        for index, message in enumerate(self._stored[token]):
            text = str(message.get("content", ""))
            if message.get("role") in ("user", "assistant") and words & _words(text):
                sender = "user" if message["role"] == "user" else "assistant"
                raw.append(
                    {"id": f"raw-{index}", "senderName": sender, "contentItems": [{"type": "text", "text": text}]}
                )
        top_k = int(payload.get("topK", 10))
        return {"items": [], "profiles": [], "rawMessages": raw[:top_k], "agentMemory": {"cases": [], "skills": []}}

    @staticmethod
    def _envelope(
        request_id: str, *, result: Any = None, status: int = 0, error: str = "", http: int = 200
    ) -> web.Response:
        answer = {"error": error or None, "requestId": request_id, "status": status, "result": result}
        return web.json_response(answer, status=http, headers={"requestId": request_id})

    async def _misbehave(self, request: web.Request, mode: Mode, request_id: str) -> web.StreamResponse:
        if mode.kind == "envelope":
            return self._envelope(request_id, status=mode.status, error=mode.error, http=mode.http)
        if mode.kind == "no_status":
            return web.json_response({"requestId": request_id, "result": {"items": []}})
        if mode.kind == "html":
            return web.Response(status=mode.http, text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                                content_type="text/html")  # fmt: skip
        if mode.kind == "drop":
            assert request.transport is not None
            request.transport.abort()
            await self._release.wait()
        if mode.kind == "stall_body":
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.content_length = 1000
            await response.prepare(request)
            await response.write(b'{"status": 0, "res')
            await self._release.wait()
            return response
        await self._release.wait()  # stall: answer nothing until the fake closes
        return web.Response(status=503)
