"""A run's messages (the Anthropic Messages shape the agent_end hook carries) as memory messages (docs/memory.md,
"Capture"): user and assistant text, assistant tool calls with their arguments as JSON, each tool result as a
`tool` message with its call id; our own recall block stripped; ordinary text capped at 8,000 characters (a
head and a tail around a marker), tool results whole; every text redacted before it leaves this module, so
nothing downstream (the outbox, the local store, the gateway) ever holds a secret."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from general_agent_server.memory.render import strip_recall_blocks
from general_agent_server.memory.types import MemoryMessage, Role, ToolCall, native_id
from general_agent_server.security.redaction import redact_content, scrub

TEXT_BUDGET = 8000
_MARKER = "\n…[{} characters omitted]…\n"
# Prompts that start a conversation over: not worth remembering, and remembering them confuses recall.
_RESET = re.compile(r"^\s*(?:/clear|/reset|/new|start over|重新开始|新对话)\s*[.!。！]?\s*$", re.IGNORECASE)


def is_reset_prompt(text: str) -> bool:
    return bool(_RESET.match(text))


def cap_text(text: str, budget: int = TEXT_BUDGET) -> str:
    """`text` within `budget` code points: 70% head and 30% tail around a marker whose length is reserved."""
    if len(text) <= budget:
        return text
    marker = _MARKER.format(len(text) - budget)
    room = max(budget - len(marker), 0)
    head = room * 7 // 10
    tail = room - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def clean(text: str) -> str:
    """Redacted: the registered secrets, the content patterns, and the gateway credentials' shapes."""
    redacted, _ = redact_content(text)
    return scrub(redacted)


def _text_of(blocks: Iterable[Mapping[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text" and b.get("text")).strip()


def _result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type', 'part')}]" for p in content]
        return "\n".join(parts).strip()
    return ""


def convert_run(
    messages: Sequence[Mapping[str, Any]],
    *,
    conversation_id: str,
    run_id: str,
    first_index: int,
    now_ms: int,
    success: bool,
) -> list[MemoryMessage]:
    """The run's messages from `first_index` on, converted and redacted. `turn_complete` marks the final
    assistant message of a completed run; earlier assistant messages are marked False (commentary or tool
    use, never a turn's end); a failed or stopped run leaves its last one unmarked."""
    converted: list[MemoryMessage] = []
    for index, message in enumerate(messages[first_index:], start=first_index):
        blocks = [b for b in message.get("content", ()) if isinstance(b, Mapping)]
        if isinstance(message.get("content"), str):
            blocks = [{"type": "text", "text": message["content"]}]
        stamp = now_ms + len(converted)  # keeps the order where messages carry no time of their own
        ident = f"{conversation_id}\x1f{run_id}\x1f{index}"
        if message.get("role") == "assistant":
            converted.extend(_assistant(blocks, stamp, ident))
        elif message.get("role") == "user":
            converted.extend(_user(blocks, stamp, ident))
    assistants = [i for i, m in enumerate(converted) if m.role == "assistant"]
    for position in assistants:
        last = position == assistants[-1]
        flag: bool | None = (success and not converted[position].tool_calls) if last else False
        if last and not success:
            flag = None
        old = converted[position]
        converted[position] = MemoryMessage(
            role=old.role,
            content=old.content,
            timestamp_ms=old.timestamp_ms,
            native_id=old.native_id,
            tool_calls=old.tool_calls,
            turn_complete=flag,
        )
    return converted


def _message(role: Role, content: str, stamp: int, ident: str, **fields: Any) -> MemoryMessage:
    return MemoryMessage(
        role=role, content=content, timestamp_ms=stamp, native_id=native_id(ident, role, content), **fields
    )


def _assistant(blocks: list[Mapping[str, Any]], stamp: int, ident: str) -> list[MemoryMessage]:
    text = cap_text(clean(_text_of(blocks)))
    calls = tuple(
        ToolCall(
            id=str(b.get("id", "")),
            name=str(b.get("name", "")),
            arguments=clean(json.dumps(b.get("input", {}), ensure_ascii=False, separators=(",", ":"))),
        )
        for b in blocks
        if b.get("type") == "tool_use" and b.get("id")
    )
    if not text and not calls:
        return []
    return [_message("assistant", text, stamp, ident, tool_calls=calls)]


def _user(blocks: list[Mapping[str, Any]], stamp: int, ident: str) -> list[MemoryMessage]:
    out: list[MemoryMessage] = []
    for position, block in enumerate(blocks):
        if block.get("type") == "tool_result" and block.get("tool_use_id"):
            text = clean(_result_text(block)) or ("(error)" if block.get("is_error") else "(empty)")
            call_id = str(block["tool_use_id"])
            out.append(_message("tool", text, stamp, f"{ident}\x1f{position}", tool_call_id=call_id))
    text = strip_recall_blocks(_text_of(blocks))
    if text and not is_reset_prompt(text):
        out.insert(0, _message("user", cap_text(clean(text)), stamp, ident))
    return out


def shape(messages: Sequence[MemoryMessage]) -> str:
    """A one-line shape of a capture for the logs, e.g. `U:1/A:2(tc=1)/T:1` (counts only, never content)."""
    users = sum(1 for m in messages if m.role == "user")
    assistants = [m for m in messages if m.role == "assistant"]
    calls = sum(len(m.tool_calls) for m in assistants)
    tools = sum(1 for m in messages if m.role == "tool")
    return f"U:{users}/A:{len(assistants)}(tc={calls})/T:{tools}"
