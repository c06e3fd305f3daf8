"""A scripted fake of the Anthropic Messages API, for tests and benchmarks.

Why this exists: the service under test talks to Anthropic through the official
``anthropic`` SDK. Mocking the SDK in-process would skip the parts that break in
practice (SSE framing, retries on 429/5xx/529, stream accumulation, client-side
cancellation), and the real API is neither free, deterministic nor reachable
from CI. So this module serves the *real wire format* over loopback HTTP, and a
test points the real client at it with
``AsyncAnthropic(base_url=fake.base_url, api_key="test")``.

Three ways to run it:

* :class:`FakeAnthropic` -- inside the test's own event loop (``async with``).
* :class:`FakeAnthropicThread` -- its own event loop in a daemon thread, for
  sync tests and for tests whose server under test is a subprocess.
* ``python -m general_agent.testing.fake_anthropic --port 0 --ready-file PATH``
  -- a separate process with a fixed reply (or, with ``--script tool_round``,
  :func:`tool_round_responder`), for benchmarks that pin the fake to its own
  core so it does not steal CPU from the code being measured.

Scripting: replies are consumed FIFO, one per ``POST /v1/messages``
(:meth:`FakeAnthropic.enqueue`); when the queue is empty ``default_reply`` is
used; a ``responder`` callable overrides both so many concurrent sessions can be
answered by looking at each request. Every request is recorded
(:class:`RecordedRequest`), including the ones the fake rejects.

Layout: ``replies`` (what a test scripts), ``recording`` (what is kept of each request), ``wire`` and
``prompt_cache`` (the Messages API's wire format and token accounting), ``handler`` (answering one HTTP
request), ``server`` (:class:`FakeAnthropic`), ``thread`` (:class:`FakeAnthropicThread`), ``scripts`` (ready-made
responders) and ``cli`` (process mode); every public name is importable from this package.
"""

from __future__ import annotations

from .cli import main
from .recording import RecordedRequest, Responder
from .replies import (
    Block,
    CutStreamReply,
    ErrorReply,
    HangReply,
    RedactedThinkingBlock,
    Reply,
    ReplyLike,
    StreamErrorReply,
    TextBlock,
    TextReply,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    estimate_tokens,
    text_deltas,
)
from .scripts import tool_round_responder
from .server import FakeAnthropic
from .signals import ThreadSafeEvent
from .thread import FakeAnthropicThread

__all__ = [
    "Block",
    "CutStreamReply",
    "ErrorReply",
    "FakeAnthropic",
    "FakeAnthropicThread",
    "HangReply",
    "RecordedRequest",
    "RedactedThinkingBlock",
    "Reply",
    "ReplyLike",
    "Responder",
    "StreamErrorReply",
    "TextBlock",
    "TextReply",
    "ThinkingBlock",
    "ThreadSafeEvent",
    "ToolUseBlock",
    "Usage",
    "estimate_tokens",
    "main",
    "text_deltas",
    "tool_round_responder",
]
