"""A prompt as a recall query (docs/memory.md, "Recall"): our own recall block, system reminders and a leading
slash command removed, fenced code folded, long unbroken runs (hashes, base64) folded, whitespace collapsed,
and the last 1,024 characters kept from a word boundary. Trivial prompts (fewer than three words, each CJK
character counting as one) and reset commands are not worth a recall."""

from __future__ import annotations

import re

from general_agent_server.memory.convert import is_reset_prompt
from general_agent_server.memory.render import strip_recall_blocks

MAX_QUERY_CHARS = 1024
MIN_TOKENS = 3
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_LONG_RUN = re.compile(r"\S{400,}")
_COMMAND = re.compile(r"^/[A-Za-z][\w-]*\s*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def recall_query(prompt: str) -> str:
    text = strip_recall_blocks(prompt)
    text = _REMINDER.sub(" ", text)
    text = _FENCE.sub(" [...] ", text)
    text = _COMMAND.sub("", text.lstrip())
    text = _LONG_RUN.sub("[...]", text)
    text = " ".join(text.split())
    if len(text) > MAX_QUERY_CHARS:
        tail = text[-MAX_QUERY_CHARS:]
        space = tail.find(" ")
        text = tail[space + 1 :] if 0 <= space < 64 else tail
    return text


def token_count(text: str) -> int:
    """Words, with every CJK character a word of its own (CJK text has no spaces between words)."""
    count = 0
    for word in _WORD.findall(text):
        cjk = len(_CJK.findall(word))
        count += cjk + (1 if len(word) > cjk else 0)
    return count


def worth_recalling(prompt: str, query: str) -> bool:
    return not is_reset_prompt(prompt) and token_count(query) >= MIN_TOKENS


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def cjk_runs(text: str) -> list[str]:
    """The maximal runs of CJK characters in `text`."""
    return re.findall(f"(?:{_CJK.pattern})+", text)
