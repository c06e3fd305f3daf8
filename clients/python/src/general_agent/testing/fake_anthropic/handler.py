"""How the fake answers one HTTP request: validation like the real API's, then the scripted reply as JSON or as
an SSE stream (cut, failed or hung as scripted). :class:`FakeAnthropic` (server.py) is a ``MessagesHandler``
and supplies its recording and its next reply."""

from __future__ import annotations

import abc
import asyncio
import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Final

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from .prompt_cache import PromptCache
from .recording import JSONDict, RecordedRequest
from .replies import (
    ERROR_STATUS,
    CutStreamReply,
    ErrorReply,
    HangReply,
    ReplyLike,
    StreamErrorReply,
    estimate_tokens,
)
from .signals import ThreadSafeEvent
from .wire import COUNT_TOKENS_PATH, MESSAGES_PATH, _dumps, _error_body, _Message, sse_frame

# How often a hung stream checks whether its client went away or the server is
# stopping. aiohttp also cancels the handler on disconnect; this is the fallback.
_HANG_POLL_SECONDS: Final = 0.05


class _ClientGone(Exception):
    """The client disconnected (or the server is stopping) while a stream was open."""


class MessagesHandler(abc.ABC):
    """The HTTP side of :class:`FakeAnthropic`; the server supplies the attributes and the abstract methods."""

    validate: bool
    prompt_cache: PromptCache | None
    _stopping: bool

    @abc.abstractmethod
    def _record(self, rec: RecordedRequest, is_message: bool) -> None:
        """Adds the request to the server's recording (to its messages requests too when `is_message`)."""

    @abc.abstractmethod
    async def _next_reply(self, rec: RecordedRequest) -> ReplyLike:
        """The reply for this request: the responder's, else the next enqueued one, else the default reply."""

    def _error(
        self,
        rec: RecordedRequest,
        status: int,
        error_type: str,
        message: str,
        extra_headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        rec.status = status
        headers = {"request-id": rec.request_id, **(extra_headers or {})}
        response = web.json_response(
            _error_body(error_type, message, rec.request_id),
            status=status,
            headers=headers,
            dumps=_dumps,
        )
        rec.completed.set()
        return response

    def _validate(self, rec: RecordedRequest, parse_ok: bool, *, count_tokens: bool) -> web.Response | None:
        if not rec.api_key:
            return self._error(rec, 401, "authentication_error", "x-api-key header is required")
        if not rec.headers.get("anthropic-version"):
            return self._error(rec, 400, "invalid_request_error", "anthropic-version: header is required")
        if not parse_ok:
            return self._error(rec, 400, "invalid_request_error", "There was an error parsing the body of your request")
        required = ("model", "messages") if count_tokens else ("model", "max_tokens", "messages")
        for name in required:
            if name not in rec.body:
                return self._error(rec, 400, "invalid_request_error", f"{name}: Field required")
        if not isinstance(rec.body["messages"], list):
            return self._error(rec, 400, "invalid_request_error", "messages: Input should be a valid list")
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        request_id = f"req_fake_{uuid.uuid4().hex[:24]}"
        too_large = False
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raw, too_large = b"", True
        body: JSONDict = {}
        parse_ok = True
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
            parse_ok = False
        if isinstance(parsed, dict):
            body = parsed
        elif raw:
            parse_ok = False
        path = request.path
        is_message = path == MESSAGES_PATH
        rec = RecordedRequest(
            index=-1,
            method=request.method,
            path=path,
            headers=CIMultiDictProxy(CIMultiDict(request.headers)),
            raw_body=raw,
            body=body,
            request_id=request_id,
            received_at=time.monotonic(),
        )
        self._record(rec, is_message and request.method == "POST")

        if request.method != "POST" or path not in (MESSAGES_PATH, COUNT_TOKENS_PATH):
            return self._error(rec, 404, "not_found_error", "Not Found")
        if too_large:
            return self._error(rec, 413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
        if self.validate:
            rejected = self._validate(rec, parse_ok, count_tokens=not is_message)
            if rejected is not None:
                return rejected
        if not is_message:
            rec.status = 200
            response = web.json_response(
                {"input_tokens": estimate_tokens(rec.body)}, headers={"request-id": request_id}
            )
            rec.completed.set()
            return response

        reply = await self._next_reply(rec)
        rec.reply = reply
        return await self._serve(request, rec, reply)

    async def _serve(self, request: web.Request, rec: RecordedRequest, reply: ReplyLike) -> web.StreamResponse:
        if isinstance(reply, ErrorReply):
            headers = dict(reply.headers)
            if reply.retry_after is not None:
                headers["retry-after"] = str(max(0, math.ceil(reply.retry_after)))
                headers["retry-after-ms"] = str(max(0, round(reply.retry_after * 1000)))
            if reply.should_retry is not None:
                headers["x-should-retry"] = "true" if reply.should_retry else "false"
            return self._error(rec, reply.status, reply.resolved_error_type(), reply.resolved_message(), headers)

        if isinstance(reply, StreamErrorReply):
            if not rec.stream:
                status = ERROR_STATUS.get(reply.error_type, 500)
                return self._error(rec, status, reply.error_type, reply.message)
            msg = _Message(reply.base_reply(), rec, self.prompt_cache)
            events = [msg.start_event(), *msg.block_events(limit=reply.after_blocks)]
            events.append(("error", _error_body(reply.error_type, reply.message, rec.request_id)))
            return await self._stream(request, rec, events, delay=msg.reply.delay_between_events)

        if isinstance(reply, CutStreamReply):
            if not rec.stream:
                return self._error(rec, 500, "api_error", "Internal server error")
            msg = _Message(reply.base_reply(), rec, self.prompt_cache)
            events = msg.all_events()[: reply.after_events]
            return await self._stream(request, rec, events, delay=msg.reply.delay_between_events, garbage=reply.garbage)

        if isinstance(reply, HangReply):
            msg = _Message(reply.base_reply(), rec, self.prompt_cache)
            if not rec.stream:
                try:
                    await self._wait_gate(request, reply.gate)
                except _ClientGone:
                    return self._abort(request, rec)
                except asyncio.CancelledError:
                    self._note_gone(rec)
                    raise
                return self._json(rec, msg)
            return await self._stream(
                request,
                rec,
                msg.all_events(),
                delay=msg.reply.delay_between_events,
                hang_after=reply.after_events,
                gate=reply.gate,
            )

        msg = _Message(reply.to_reply(), rec, self.prompt_cache)
        if not rec.stream:
            return self._json(rec, msg)
        return await self._stream(request, rec, msg.all_events(), delay=msg.reply.delay_between_events)

    def _json(self, rec: RecordedRequest, msg: _Message) -> web.Response:
        rec.status = 200
        response = web.json_response(msg.full_json(), headers={"request-id": rec.request_id}, dumps=_dumps)
        rec.completed.set()
        return response

    def _note_gone(self, rec: RecordedRequest) -> None:
        if not self._stopping:
            rec.disconnected.set()

    def _abort(self, request: web.Request, rec: RecordedRequest) -> web.StreamResponse:
        self._note_gone(rec)
        if request.transport is not None:
            request.transport.close()
        return web.StreamResponse()

    async def _wait_gate(self, request: web.Request, gate: ThreadSafeEvent) -> None:
        while not await gate.wait(_HANG_POLL_SECONDS):
            transport = request.transport
            if self._stopping or transport is None or transport.is_closing():
                raise _ClientGone

    async def _stream(
        self,
        request: web.Request,
        rec: RecordedRequest,
        events: Sequence[tuple[str, JSONDict]],
        *,
        delay: float = 0.0,
        hang_after: int | None = None,
        gate: ThreadSafeEvent | None = None,
        garbage: bool = False,
    ) -> web.StreamResponse:
        rec.status = 200
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": rec.request_id,
            },
        )
        try:
            await response.prepare(request)
            for i, (event, data) in enumerate(events):
                if gate is not None and i == hang_after:
                    await self._wait_gate(request, gate)
                await response.write(sse_frame(event, data))
                if delay > 0:
                    await asyncio.sleep(delay)
            if gate is not None and hang_after is not None and hang_after >= len(events):
                await self._wait_gate(request, gate)
            if garbage:
                await response.write(b"event: content_block_delta\ndata: {not json\n\n")
            await response.write_eof()
        except (_ClientGone, ConnectionResetError):
            self._note_gone(rec)
            if request.transport is not None:
                request.transport.close()
            return response
        except asyncio.CancelledError:
            self._note_gone(rec)
            raise
        rec.completed.set()
        return response
