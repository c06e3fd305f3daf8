"""The summary a compaction replaces older history with, written by the model (docs/protocol.md, compaction).

The older messages are rendered as plain text (who said what, which tool was called with what and what it
returned), so the summariser needs no tool definitions and never sees a dangling tool_use. That text is sent
in as few requests as the summariser's input cap allows: when it is longer, it is cut at message boundaries
into chunks, and each request after the first carries the summary so far, which it extends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import Usage
from general_agent_server.model.port import Credential, MessageComplete, ModelClient, ModelRequest

# What the model is asked to keep. Hosts may add their own instructions (RequestCompaction.instructions).
SUMMARY_INSTRUCTIONS = """\
You are compacting the earlier part of a conversation between a user and an AI agent. The agent will continue \
the work with only your summary and the most recent messages, so the summary must carry everything it needs.

Write a concise, complete summary that keeps:
- the user's goals, requests and constraints;
- decisions made, and why;
- facts learned: names, numbers, identifiers, URLs, versions, errors;
- file paths, commands and code locations that were read, changed or created;
- tool calls that mattered and their outcomes, failures included;
- open tasks, unanswered questions and the planned next steps.

Do not invent anything and do not continue the conversation. Write in the language of the conversation. \
Output only the summary."""

SUMMARY_HEADER = "[Summary of the earlier conversation, written when it was compacted]"
# Characters per token for the estimates the caps are computed with (conservative for English text).
CHARS_PER_TOKEN = 4


class SummaryFailed(Exception):
    """The summariser's call failed or gave no text."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Summary:
    text: str
    usage: Usage
    requests: int


def estimate_tokens(value: Any) -> int:
    """A rough token count of anything JSON-encodable (an estimate, flagged as such where it is reported)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return -(-len(text) // CHARS_PER_TOKEN)


def render(messages: Sequence[HistoryMessage]) -> list[str]:
    """Each message as text the summariser reads; tool calls with their inputs, results with their text."""
    names: dict[str, str] = {}
    rendered = []
    for message in messages:
        parts: list[str] = []
        for block in message.content:
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                parts.append(str(block["text"]))
            elif kind == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
                arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
                parts.append(f"[called tool {block.get('name')} with {arguments}]")
            elif kind == "tool_result":
                parts.append(_result_text(block, names.get(str(block.get("tool_use_id")), "a tool")))
            elif kind == "image":
                parts.append("[image]")
        if parts:
            speaker = "Assistant" if message.role == "assistant" else "User"
            rendered.append(f"{speaker}: " + "\n".join(parts))
    return rendered


def _result_text(block: dict[str, Any], tool: str) -> str:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(str(b.get("text", "[image]")) for b in content if isinstance(b, dict))
    label = "error from" if block.get("is_error") else "result of"
    return f"[{label} {tool}: {content}]"


def chunks(rendered: Sequence[str], max_tokens: int) -> list[str]:
    """The rendered messages cut at message boundaries into pieces of at most `max_tokens` (estimated); a single
    message longer than that is cut into pieces of its own."""
    limit = max(1, max_tokens) * CHARS_PER_TOKEN
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for text in rendered:
        for part in [text[i : i + limit] for i in range(0, len(text), limit)] or [""]:
            if current and size + len(part) + 2 > limit:
                pieces.append("\n\n".join(current))
                current, size = [], 0
            current.append(part)
            size += len(part) + 2
    if current:
        pieces.append("\n\n".join(current))
    return pieces


async def summarise(
    model: ModelClient,
    credential: Credential,
    messages: Sequence[HistoryMessage],
    *,
    model_id: str,
    max_tokens: int,
    input_cap_tokens: int,
    instructions: str = "",
) -> Summary:
    """The summary of `messages`, in as few requests as `input_cap_tokens` allows."""
    system = SUMMARY_INSTRUCTIONS + (f"\n\nAlso follow these instructions:\n{instructions}" if instructions else "")
    room = input_cap_tokens - estimate_tokens(system) - max_tokens
    text, usage, requests = "", Usage(), 0
    for piece in chunks(render(messages), room):
        prompt = f"<conversation>\n{piece}\n</conversation>"
        if text:
            prompt = f"<summary_so_far>\n{text}\n</summary_so_far>\n\nExtend the summary with this next part:\n{prompt}"
        request = ModelRequest(
            model=model_id,
            max_tokens=max_tokens,
            system=[{"type": "text", "text": system}],
            messages=[{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        )
        complete = await _call(model, request, credential)
        usage, requests = usage + complete.usage, requests + 1
        text = "\n".join(b["text"] for b in complete.content if b.get("type") == "text" and b.get("text")).strip()
        if not text:
            raise SummaryFailed("the summariser returned no text")
    return Summary(text=text, usage=usage, requests=requests)


async def _call(model: ModelClient, request: ModelRequest, credential: Credential) -> MessageComplete:
    complete: MessageComplete | None = None
    async for item in model.stream(request, credential):
        if isinstance(item, MessageComplete):
            complete = item
    if complete is None:
        raise SummaryFailed("the summariser's stream ended without a message")
    return complete
