"""Finding the text `edit` replaces: exactly first, then tolerantly (what models get wrong when they retype
text: Unicode compatibility forms, trailing whitespace, smart quotes, Unicode dashes, special spaces).

A tolerant match is mapped back to the span of the original text it covers, so only that span is replaced and
the rest of the file keeps its exact bytes: an edit never rewrites text the model did not ask to change."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

# Smart quotes, Unicode dashes and special spaces, as ASCII (shared with apply_patch's line matching).
PUNCTUATION_TO_ASCII = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "),
    }
)


@dataclass(frozen=True, slots=True)
class Matches:
    spans: list[tuple[int, int]]  # non-overlapping [start, end) in the original text
    fuzzy: bool  # found only by tolerant matching


def find_text(content: str, old: str) -> Matches:
    """Where `old` occurs in `content`: exact occurrences when there are any, else tolerant ones."""
    exact = _occurrences(content, old)
    if exact:
        return Matches(spans=[(start, start + len(old)) for start in exact], fuzzy=False)
    wanted = _Normalised.of(old).text
    if not wanted:
        return Matches(spans=[], fuzzy=True)
    normalised = _Normalised.of(content)
    spans = []
    for start in _occurrences(normalised.text, wanted):
        span = normalised.original_span(start, start + len(wanted))
        if span is not None:
            spans.append(span)
    return Matches(spans=spans, fuzzy=True)


def normalise_punctuation(text: str) -> str:
    return text.translate(PUNCTUATION_TO_ASCII)


def _occurrences(haystack: str, needle: str) -> list[int]:
    """Starts of the non-overlapping occurrences, left to right."""
    found = []
    start = haystack.find(needle)
    while start != -1 and needle:
        found.append(start)
        start = haystack.find(needle, start + len(needle))
    return found


@dataclass(frozen=True, slots=True)
class _Normalised:
    """Normalised text, with each of its characters traced to the span of original text it came from.

    The text is cut into segments (a character with the combining marks after it; a line's trailing whitespace
    produces nothing); each segment is normalised on its own, so every normalised character belongs to exactly
    one segment."""

    text: str
    segment: list[int]  # per normalised character: the index of its segment
    bounds: list[tuple[int, int]]  # per segment: [start, end) in the original

    @staticmethod
    def of(original: str) -> _Normalised:
        out: list[str] = []
        segment: list[int] = []
        bounds: list[tuple[int, int]] = []

        def emit(start: int, end: int, produced: str) -> None:
            if produced:
                segment.extend([len(bounds)] * len(produced))
                out.append(produced)
                bounds.append((start, end))

        line_start = 0
        for line in original.split("\n"):
            kept_end = line_start + len(line.rstrip())
            position = line_start
            while position < kept_end:
                end = position + 1
                while end < kept_end and unicodedata.combining(original[end]):
                    end += 1
                piece = unicodedata.normalize("NFKC", original[position:end]).translate(PUNCTUATION_TO_ASCII)
                emit(position, end, piece)
                position = end
            line_end = line_start + len(line)
            if line_end < len(original):
                emit(line_end, line_end + 1, "\n")
            line_start = line_end + 1
        return _Normalised(text="".join(out), segment=segment, bounds=bounds)

    def original_span(self, start: int, end: int) -> tuple[int, int] | None:
        """The original span a normalised match covers, or None when the match begins or ends inside what one
        original segment produced (replacing the whole segment would change text the match does not cover)."""
        first, last = self.segment[start], self.segment[end - 1]
        if start > 0 and self.segment[start - 1] == first:
            return None
        if end < len(self.segment) and self.segment[end] == last:
            return None
        return self.bounds[first][0], self.bounds[last][1]
