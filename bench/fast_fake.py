"""A fast fake of the Messages API for the benchmarks: raw asyncio HTTP/1.1, pre-built SSE replies.

The test fake (general_agent.testing.fake_anthropic) records and validates every request on aiohttp and
costs several milliseconds per request, which hides the service's own cost inside the baseline's turn.
This one parses only the request line, the headers and the body's length, picks a reply by a marker in
the body and writes pre-encoded bytes with a Content-Length (keep-alive, no compression). It measures
its own time per request (from the body's last byte to the reply handed to the socket) and reports it at
`GET /stats`; `GET /last` returns the last Messages request's body, `/prev` the one before (so a
baseline can send exactly what the service sent), `GET /reset` clears them.

Replies, chosen in this order:
- the body contains a `tool_result` block → `TEXT_REPLY` (the end of a tool round);
- the body contains `MARK_GLOB` → one `glob` tool_use (its input streamed as two `input_json_delta`s);
- the body contains `MARK_DELTAS` → `DELTAS` text deltas ("t0 ", "t1 ", … as the test fake's `--deltas`);
- otherwise → `TEXT_REPLY` as `TEXT_PIECES` text deltas.

`python -m bench.fast_fake --port 0 --ready-file F` writes {"address", "base_url", "pid"} to F when it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any, Final

MARK_GLOB: Final = "@bench-glob"
MARK_DELTAS: Final = "@bench-deltas"
DELTAS: Final = 1000
TEXT_REPLY: Final = "Hello! This is a short answer from the fast fake model, in ten pieces."
TEXT_PIECES: Final = 10
GLOB_INPUT: Final = {"pattern": "*.txt"}
MODEL: Final = "claude-haiku-4-5-20251001"


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def deltas_text(n: int = DELTAS) -> str:
    return "".join(f"t{i} " for i in range(n))


def _message(blocks: list[bytes], stop_reason: str, output_tokens: int) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    }
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    return b"".join(
        [
            _frame("message_start", start),
            *blocks,
            _frame("message_delta", end),
            _frame("message_stop", {"type": "message_stop"}),
        ]
    )


def _text_block(pieces: list[str]) -> bytes:
    out = [
        _frame(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
    ]
    for piece in pieces:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        out.append(_frame("content_block_delta", delta))
    out.append(_frame("content_block_stop", {"type": "content_block_stop", "index": 0}))
    return b"".join(out)


def text_body(text: str = TEXT_REPLY, pieces: int = TEXT_PIECES) -> bytes:
    return _message([_text_block(_split(text, pieces))], "end_turn", pieces)


def deltas_body(n: int = DELTAS) -> bytes:
    return _message([_text_block([f"t{i} " for i in range(n)])], "end_turn", n)


def glob_body(tool_id: str) -> bytes:
    raw = json.dumps(GLOB_INPUT, separators=(",", ":"))
    half = len(raw) // 2
    block = {"type": "tool_use", "id": tool_id, "name": "glob", "input": {}}
    frames = [_frame("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})]
    for part in (raw[:half], raw[half:]):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": part}}
        frames.append(_frame("content_block_delta", delta))
    frames.append(_frame("content_block_stop", {"type": "content_block_stop", "index": 0}))
    return _message([b"".join(frames)], "tool_use", 12)


def _response(body: bytes, content_type: bytes = b"text/event-stream") -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\nrequest-id: req_bench\r\n"
        b"cache-control: no-cache\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    return head + body


class _State:
    def __init__(self) -> None:
        self.requests = 0
        self.busy_ns = 0
        self.last = b""
        self.prev = b""
        self.text = _response(text_body())
        self.deltas = _response(deltas_body())
        self.tool_ids = itertools.count()


class _Conn(asyncio.Protocol):
    def __init__(self, state: _State) -> None:
        self.state = state
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self._handle(head.split(b" ", 2), body)

    def _handle(self, request_line: list[bytes], body: bytes) -> None:
        t0 = time.perf_counter_ns()
        state = self.state
        method, path = request_line[0], request_line[1] if len(request_line) > 1 else b"/"
        transport = self.transport
        assert transport is not None
        if path.startswith(b"/v1/messages") and method == b"POST":
            state.prev, state.last = state.last, body
            if b'"tool_result"' in body:
                out = state.text
            elif MARK_GLOB.encode() in body:
                out = _response(glob_body(f"toolu_bench_{next(state.tool_ids)}"))
            elif MARK_DELTAS.encode() in body:
                out = state.deltas
            else:
                out = state.text
            transport.write(out)
            state.requests += 1
            state.busy_ns += time.perf_counter_ns() - t0
        elif path == b"/stats":
            stats = {"requests": state.requests, "busy_ms": state.busy_ns / 1e6}
            transport.write(_response(json.dumps(stats).encode(), b"application/json"))
        elif path == b"/last":
            transport.write(_response(state.last, b"application/json"))
        elif path == b"/prev":
            transport.write(_response(state.prev, b"application/json"))
        elif path == b"/reset":
            state.requests = state.busy_ns = 0
            state.last = state.prev = b""
            transport.write(_response(b"{}", b"application/json"))
        else:
            transport.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")


async def serve(port: int, ready_file: Path | None) -> None:
    state = _State()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Conn(state), "127.0.0.1", port, backlog=1024)
    host, bound = server.sockets[0].getsockname()[:2]
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        info = {"address": f"{host}:{bound}", "base_url": f"http://{host}:{bound}", "pid": os.getpid()}
        tmp.write_text(json.dumps(info))
        os.replace(tmp, ready_file)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fast_fake")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.ready_file))


if __name__ == "__main__":
    main()
