"""Process mode: ``python -m general_agent.testing.fake_anthropic`` serves a fixed reply (or a ready-made
responder) until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from .recording import JSONDict
from .replies import ReplyLike, TextReply, text_deltas
from .scripts import SCRIPTS as _SCRIPTS
from .server import FakeAnthropic
from .wire import _dumps


def _write_ready_file(path: Path, data: JSONDict) -> None:
    # Write-then-rename so a poller never reads a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(_dumps(data), encoding="utf-8")
    os.replace(tmp, path)


async def _serve_forever(args: argparse.Namespace) -> None:
    if args.deltas is not None:
        reply: ReplyLike = text_deltas(args.deltas, args.text)
    else:
        reply = TextReply(args.text if args.text is not None else "ok")
    responder = _SCRIPTS[args.script] if args.script is not None else None
    fake = FakeAnthropic(
        host=args.host, port=args.port, default_reply=reply, responder=responder, validate=not args.no_validate
    )
    await fake.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.ready_file is not None:
            _write_ready_file(Path(args.ready_file), {"base_url": fake.base_url, "pid": os.getpid()})
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a fixed default reply until SIGTERM/SIGINT.

    Why a process: benchmarks run the fake pinned to its own core so its CPU
    use does not distort what is being measured. ``--deltas N`` streams exactly
    N text deltas (each ``--text`` if given); otherwise ``--text`` (default
    ``ok``) is the reply. ``--script tool_round`` answers each request with
    :func:`tool_round_responder` instead (not combinable with ``--deltas`` or
    ``--text``). The ready file gets ``{"base_url": ..., "pid": ...}`` once the
    port is bound.
    """
    parser = argparse.ArgumentParser(
        prog="python -m general_agent.testing.fake_anthropic",
        description="Scripted fake Anthropic Messages API serving a fixed reply.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--ready-file", help="write {'base_url': ...} here once listening")
    parser.add_argument("--deltas", type=int, help="reply with exactly N text deltas")
    parser.add_argument("--text", help="reply text, or each delta's text with --deltas")
    parser.add_argument(
        "--script",
        choices=sorted(_SCRIPTS),
        help="answer by inspecting each request: tool_round = tool_use of read(bench.txt), then 'done' "
        "after the tool_result",
    )
    parser.add_argument("--no-validate", action="store_true", help="skip auth/field checks")
    args = parser.parse_args(argv)
    if args.script is not None and (args.deltas is not None or args.text is not None):
        parser.error("--script cannot be combined with --deltas or --text")
    asyncio.run(_serve_forever(args))
    return 0
