"""The full model history: every message exactly as exchanged with the provider (thinking signatures
included), so a resumed, restarted or forked session sends the model what it saw before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

HISTORY_FORMAT_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryMessage:
    """One message of the model history. `content` holds Anthropic content blocks as JSON objects;
    `model_ref` records which model wrote an assistant message (thinking blocks are replayed only to
    the same model family)."""

    role: Literal["user", "assistant"]
    content: tuple[dict[str, Any], ...]
    run_id: str = ""
    model_ref: str = ""
    format_version: int = HISTORY_FORMAT_VERSION

    def api_message(self) -> dict[str, Any]:
        """The message as the Messages API takes it."""
        return {"role": self.role, "content": list(self.content)}
