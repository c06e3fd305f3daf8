"""`scrub` runs its key-shaped patterns only on text holding one of their marker words (security/redaction.py):
every text a pattern matches holds a marker, so the shortcut never lets a key-shaped value through."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from general_agent_server.security import redaction
from general_agent_server.security.redaction import REDACTED, scrub

PATTERNS: list[re.Pattern[str]] = [*redaction._PATTERNS, *(p for p, _ in redaction._GATEWAY_PATTERNS)]


def every_pattern_applied(text: str) -> str:
    """scrub without the shortcut."""
    text = redaction.redact_text(text)
    for pattern in redaction._PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    for pattern, replacement in redaction._GATEWAY_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_whatever_a_pattern_matches_holds_a_marker(data: st.DataObject) -> None:
    pattern = data.draw(st.sampled_from(PATTERNS))
    matched = data.draw(st.from_regex(pattern, fullmatch=True))
    assert any(marker in matched.lower() for marker in redaction._PATTERN_MARKERS), (pattern.pattern, matched)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=20),
            st.sampled_from(PATTERNS).flatmap(lambda p: st.from_regex(p, fullmatch=True)),
        ),
        max_size=5,
    )
)
def test_scrub_equals_applying_every_pattern(pieces: list[str]) -> None:
    text = " ".join(pieces)
    assert scrub(text) == every_pattern_applied(text)


def test_plain_lines_and_key_shaped_values() -> None:
    assert scrub("run finished COMPLETED") == "run finished COMPLETED"
    assert scrub("auth: Bearer abcdefghijkl") == f"auth: Bearer {REDACTED}"
    assert "sk-ant-abcdefghij" not in scrub("key sk-ant-abcdefghijklmnop here")
