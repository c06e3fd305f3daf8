"""FTS5 queries built from plain text (docs/memory.md, "The local backend"). Nothing a user types is ever FTS
syntax: the text is cut into Unicode words, each becomes a quoted string (a quote inside doubled), and the
strings are OR-joined, so `"`, `NEAR(`, `-x`, `*` or `col:val` only ever match themselves as words.

`unicode61` sees a run of CJK characters as one token, so CJK text is searched in a second, trigram index:
each run becomes its overlapping three-character pieces; a two-character run (a common CJK word) is matched
by substring instead, since a trigram index cannot match fewer than three characters."""

from __future__ import annotations

import math
import re

from general_agent_server.memory.query import cjk_runs

MAX_TERMS = 32
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
RECENCY_DAYS = 30.0
RECENCY_WEIGHT = 0.15


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def word_query(text: str) -> str:
    """The unicode61 MATCH expression for `text`, or "" when it has no words. Words of three characters or
    more also match as prefixes (`"deploy"*` finds "deployment")."""
    terms: list[str] = []
    for word in dict.fromkeys(w.lower() for w in _WORD.findall(text)):
        terms.append(_quoted(word) + ("*" if len(word) >= 3 else ""))
        if len(terms) >= MAX_TERMS:
            break
    return " OR ".join(terms)


def trigram_query(text: str) -> str:
    """The trigram MATCH expression for the CJK runs of `text` of three characters or more."""
    pieces: list[str] = []
    for run in cjk_runs(text):
        pieces.extend(run[i : i + 3] for i in range(len(run) - 2))
    unique = list(dict.fromkeys(pieces))[:MAX_TERMS]
    return " OR ".join(_quoted(p) for p in unique)


def short_cjk_words(text: str) -> list[str]:
    """Two-character CJK runs, matched by substring."""
    return list(dict.fromkeys(run for run in cjk_runs(text) if len(run) == 2))[:MAX_TERMS]


def relevance(bm25: float) -> float:
    """bm25 (lower is better, usually negative) as a relevance in [0, 1)."""
    r = max(-bm25, 0.0)
    return r / (1.0 + r)


def blended(relevance_score: float, age_ms: int) -> float:
    """Relevance with a little recency: a memory loses its recency share over about a month."""
    recency = math.exp(-max(age_ms, 0) / (RECENCY_DAYS * 86_400_000))
    return (1 - RECENCY_WEIGHT) * relevance_score + RECENCY_WEIGHT * recency
