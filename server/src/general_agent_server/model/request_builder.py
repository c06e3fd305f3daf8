"""Turns a session's config and model history into a Messages API request (what the fake model, and
the real one, receive)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionConfig, ThinkingMode
from general_agent_server.model.catalog import (
    INTERLEAVED_THINKING_BETA,
    ThinkingKind,
    capabilities,
    provider_model_id,
)
from general_agent_server.model.history_encoding import HistoryEncoding, api_content
from general_agent_server.model.port import ModelRequest

_EPHEMERAL = {"type": "ephemeral"}


def user_content_blocks(parts: Sequence[ContentPart]) -> tuple[dict[str, Any], ...]:
    """Turn input as Anthropic content blocks; empty text parts are dropped."""
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": part.mime_type,
                        "data": base64.b64encode(part.data).decode(),
                    },
                }
            )
    return tuple(blocks)


def thinking_param(config: SessionConfig, model_ref: str, max_tokens: int) -> dict[str, Any] | None:
    """Default: adaptive where the model supports it, otherwise off. An explicit budget is clamped
    below max_tokens as the API requires."""
    mode = config.thinking.mode
    kind = capabilities(model_ref).thinking
    if mode is ThinkingMode.OFF or (mode is ThinkingMode.DEFAULT and kind is not ThinkingKind.ADAPTIVE):
        return None
    if mode is ThinkingMode.BUDGET:
        budget = max(1024, min(config.thinking.budget_tokens or 1024, max_tokens - 1))
        return {"type": "enabled", "budget_tokens": budget}
    return {"type": "adaptive"}


def effective_max_tokens(config: SessionConfig, model_ref: str, cap: int) -> int:
    limit = capabilities(model_ref).max_output_tokens
    wanted = config.max_tokens or limit
    return max(1, min(wanted, limit, cap) if cap > 0 else min(wanted, limit))


def history_messages(history: Sequence[HistoryMessage], model_ref: str) -> list[dict[str, Any]]:
    """The history as API messages: consecutive messages of one role merged (a failed call leaves two
    user messages in a row), thinking blocks kept only for the model family that wrote them."""
    family = capabilities(model_ref).family
    messages: list[dict[str, Any]] = []
    for message in history:
        content = api_content(message, family)
        if not content:
            continue
        if messages and messages[-1]["role"] == message.role:
            messages[-1]["content"].extend(content)
        else:
            messages.append({"role": message.role, "content": list(content)})
    return messages


def build_request(
    *,
    config: SessionConfig,
    model_ref: str,
    system_prompt: str,
    history: Sequence[HistoryMessage],
    tools: list[dict[str, Any]],
    max_tokens_cap: int,
    prepend_context: str = "",
    run_id: str = "",
    encoding: HistoryEncoding | None = None,
) -> ModelRequest:
    """`encoding`: the session's kept history encoding, extended by this call (model/history_encoding.py)."""
    max_tokens = effective_max_tokens(config, model_ref, max_tokens_cap)
    prefix: list[dict[str, Any]] = []
    encoded = None
    if encoding is not None:
        # What the prefix may cover: up to the last user message (it takes the cache breakpoint) and, with
        # context to prepend, up to the run's first message (it takes the context).
        stable = _last_user_index(history)
        if prepend_context:
            stable = min(stable, _first_index_of_run(history, run_id))
        prefix, encoded, start = encoding.split(history, model_ref, stable)
        history = history[start:]
    if prepend_context:
        history = _with_prepended_context(history, run_id, prepend_context)
    tail = history_messages(history, model_ref)
    _mark_cache_breakpoint(tail)
    messages = [*prefix, *tail] if prefix else tail
    system = [{"type": "text", "text": system_prompt, "cache_control": _EPHEMERAL}] if system_prompt else []
    thinking = thinking_param(config, model_ref, max_tokens)
    interleaved = thinking is not None and bool(tools) and capabilities(model_ref).interleaved_thinking_beta
    if tools:
        tools = _marked_tools(tools)
    return ModelRequest(
        model=provider_model_id(model_ref),
        max_tokens=max_tokens,
        system=system,
        messages=messages,
        tools=tools,
        thinking=thinking,
        betas=(INTERLEAVED_THINKING_BETA,) if interleaved else (),
        encoded_prefix=encoded if encoded is not None and encoded.count else None,
    )


def _last_user_index(history: Sequence[HistoryMessage]) -> int:
    for index in range(len(history) - 1, -1, -1):
        if history[index].role == "user" and history[index].content:
            return index
    return 0


def _first_index_of_run(history: Sequence[HistoryMessage], run_id: str) -> int:
    for index, message in enumerate(history):
        if message.run_id == run_id:
            return index
    return len(history)


# A tool set's definitions list → that list with its cache breakpoint; one list object per tool set, so the body
# encoder encodes a session's tools once (model/wire_body.py).
_MARKED_TOOLS: dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
_MARKED_TOOLS_MAX = 4096


def _marked_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool definitions are a cache breakpoint of their own: they change less often than messages."""
    kept = _MARKED_TOOLS.get(id(tools))
    if kept is not None and kept[0] is tools:
        return kept[1]
    marked = [*tools[:-1], {**tools[-1], "cache_control": _EPHEMERAL}]
    if len(_MARKED_TOOLS) >= _MARKED_TOOLS_MAX:
        _MARKED_TOOLS.clear()
    _MARKED_TOOLS[id(tools)] = (tools, marked)
    return marked


def _with_prepended_context(history: Sequence[HistoryMessage], run_id: str, context: str) -> list[HistoryMessage]:
    """A before_prompt_build `prependContext` goes before the first text of the run's user message, for
    the model only: the stored history (and the transcript) keep the original (docs/hooks.md)."""
    out = list(history)
    for index, message in enumerate(out):
        if message.role != "user" or message.run_id != run_id:
            continue
        blocks = list(message.content)
        for position, block in enumerate(blocks):
            if block.get("type") == "text":
                blocks[position] = {**block, "text": f"{context}\n\n{block['text']}"}
                break
        else:
            blocks.insert(0, {"type": "text", "text": context})
        out[index] = replace(message, content=tuple(blocks))
        break
    return out


def _mark_cache_breakpoint(messages: list[dict[str, Any]]) -> None:
    """Prompt caching: the last block of the last user message gets cache_control. The block is copied so
    the stored history is never mutated."""
    for message in reversed(messages):
        if message["role"] == "user" and message["content"]:
            last = dict(message["content"][-1])
            last["cache_control"] = _EPHEMERAL
            message["content"] = [*message["content"][:-1], last]
            return
