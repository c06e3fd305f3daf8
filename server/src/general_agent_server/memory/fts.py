"""FTS5 queries built from plain text (docs/memory.md, "The local backend"). Nothing a user types is ever FTS
syntax: the text is cut into Unicode words, each becomes a quoted string (a quote inside doubled), and the
strings are OR-joined, so `"`, `NEAR(`, `-x`, `*` or `col:val` only ever match themselves as words.

`unicode61` sees a run of CJK characters as one token, so CJK text is searched in a second, trigram index:
each run becomes its overlapping three-character pieces. Most CJK words are two characters, which a trigram
index cannot match, so the run's two-character pieces are also matched by substring, a row scoring by how
many of them it holds."""

from __future__ import annotations

import math
import re

from general_agent_server.memory.query import cjk_runs

MAX_TERMS = 32
MAX_BIGRAMS = 16
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


def cjk_bigrams(text: str) -> list[str]:
    """The two-character pieces of the CJK runs of `text`, matched by substring (most CJK words are two
    characters, which a trigram index cannot match)."""
    pieces = [run[i : i + 2] for run in cjk_runs(text) for i in range(len(run) - 1)]
    return list(dict.fromkeys(pieces))[:MAX_BIGRAMS]


def relevance(bm25: float) -> float:
    """bm25 (lower is better, usually negative) as a relevance in [0, 1)."""
    r = max(-bm25, 0.0)
    return r / (1.0 + r)


def blended(relevance_score: float, age_ms: int) -> float:
    """Relevance with a little recency: a memory loses its recency share over about a month."""
    recency = math.exp(-max(age_ms, 0) / (RECENCY_DAYS * 86_400_000))
    return (1 - RECENCY_WEIGHT) * relevance_score + RECENCY_WEIGHT * recency
