"""The text helpers behind edit and apply_patch: tolerant matching mapped back to original spans, the text
file codec (BOM, CRLF) and the numbered diff."""

from __future__ import annotations

import pytest

from general_agent_server.tools.files.line_diff import numbered_diff
from general_agent_server.tools.files.text_file import TextFile
from general_agent_server.tools.files.text_match import Matches, find_text
from general_agent_server.tools.runtime import ToolFailure


def test_exact_matches_come_first() -> None:
    assert find_text("abcabc", "bc") == Matches(spans=[(1, 3), (4, 6)], fuzzy=False)
    assert find_text("aaaa", "aa") == Matches(spans=[(0, 2), (2, 4)], fuzzy=False)


def test_tolerant_spans_cover_the_original_text() -> None:
    content = "x = “quoted”  \ny = 1\n"
    matches = find_text(content, 'x = "quoted"\ny')
    assert matches.fuzzy
    assert [content[start:end] for start, end in matches.spans] == ["x = “quoted”  \ny"]


def test_combining_marks_stay_with_their_letter() -> None:
    content = "cafe\u0301 bar"  # e + combining acute: NFKC composes it to é
    matches = find_text(content, "café bar")
    assert [content[start:end] for start, end in matches.spans] == [content]


def test_a_match_inside_one_expanded_character_is_not_used() -> None:
    # "ﬁ" becomes "fi" under NFKC; a match starting at its "i" would have to replace the whole ligature.
    assert find_text("ﬁx", "ix").spans == []
    assert find_text("ﬁx", "fix").spans == [(0, 2)]


def test_whitespace_only_old_text_never_matches_tolerantly() -> None:
    assert find_text("a\nb", "  ") == Matches(spans=[], fuzzy=True)


def test_text_file_round_trip() -> None:
    file = TextFile.decode(b"\xef\xbb\xbfa\r\nb\r\n", "f")
    assert (file.text, file.has_bom, file.line_ending) == ("a\nb\n", True, "\r\n")
    assert file.encode("a\nc\n") == b"\xef\xbb\xbfa\r\nc\r\n"
    plain = TextFile.decode(b"a\rb\nc", "f")
    assert (plain.text, plain.has_bom, plain.line_ending) == ("a\rb\nc", False, "\n")
    assert plain.encode(plain.text) == b"a\rb\nc"
    with pytest.raises(ToolFailure, match=r"^f is not UTF-8 text$"):
        TextFile.decode(b"\xff\xfe", "f")


def test_numbered_diff_layout() -> None:
    diff = numbered_diff("a\nb\nc\n", "a\nB\nc\nd\n", context=1)
    assert diff.text.splitlines() == [" 1 a", "-2 b", "+2 B", " 3 c", "+4 d"]
    assert diff.first_changed_line == 2
    assert numbered_diff("same\n", "same\n").text == ""
    assert numbered_diff("same\n", "same\n").first_changed_line is None
