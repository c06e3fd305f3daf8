"""Test doubles for the service's external dependencies.

Why the lazy re-export: importing this package (as the pytest plugin and the
server helper do) does not load the fake and aiohttp until a test uses a name
from it. Names resolve on first access, and the ``TYPE_CHECKING`` import keeps
them visible to mypy and IDEs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_anthropic import (
        Block,
        CutStreamReply,
        ErrorReply,
        FakeAnthropic,
        FakeAnthropicThread,
        HangReply,
        RecordedRequest,
        RedactedThinkingBlock,
        Reply,
        ReplyLike,
        Responder,
        StreamErrorReply,
        TextBlock,
        TextReply,
        ThinkingBlock,
        ThreadSafeEvent,
        ToolUseBlock,
        Usage,
        estimate_tokens,
        text_deltas,
    )

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
    "text_deltas",
]


def __getattr__(name: str) -> Any:
    """Resolve a public name from :mod:`.fake_anthropic` on first access."""
    if name in __all__:
        value = getattr(importlib.import_module(".fake_anthropic", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
