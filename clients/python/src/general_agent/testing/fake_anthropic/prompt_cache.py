"""The token accounting of Anthropic's prompt caching (``FakeAnthropic(prompt_cache=True)``)."""

from __future__ import annotations

import hashlib
import json

from .recording import JSONDict


class PromptCache:
    """Anthropic's prompt caching, as far as token accounting goes: a request's prefix up to a block marked
    ``cache_control`` is written to the cache; a later request whose prefix (tools, then system, then messages)
    matches a written one, at a breakpoint or up to 20 blocks before it, reads it back. The markers themselves
    are not part of what is compared, so a breakpoint that moves to the newest message still hits."""

    LOOKBACK = 20

    def __init__(self) -> None:
        self._written: set[str] = set()

    def usage(self, body: JSONDict) -> tuple[int, int]:
        """``(cache_read_input_tokens, cache_creation_input_tokens)`` of a request, recording what it writes."""
        items: list[tuple[str, bool]] = []
        for tool in body.get("tools") or []:
            items.append(self._item(tool))
        system = body.get("system")
        for block in system if isinstance(system, list) else ([{"type": "text", "text": system}] if system else []):
            items.append(self._item(block))
        for message in body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
                items.append(self._item({"role": message.get("role"), **block}))
        digests, sizes, digest, size = [], [], hashlib.sha256(), 0
        for text, _ in items:
            digest.update(text.encode())
            size += len(text)
            digests.append(digest.hexdigest())
            sizes.append(size)
        breakpoints = [i for i, (_, marked) in enumerate(items) if marked]
        read = 0
        for point in reversed(breakpoints):
            hit = next(
                (i for i in range(point, max(-1, point - self.LOOKBACK), -1) if digests[i] in self._written), None
            )
            if hit is not None:
                read = max(read, sizes[hit] // 4)
        written = sizes[breakpoints[-1]] // 4 if breakpoints else 0
        self._written.update(digests[i] for i in breakpoints)
        return read, max(0, written - read)

    @staticmethod
    def _item(block: JSONDict) -> tuple[str, bool]:
        marked = "cache_control" in block
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        return json.dumps(plain, sort_keys=True, separators=(",", ":")), marked
