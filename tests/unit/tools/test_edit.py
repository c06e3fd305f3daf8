"""`edit`: exact then tolerant matching (only the matched span changes), the unique-match rule, its
messages, CRLF and BOM preserved, a numbered diff back, and every escape refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from general_agent_server.tools.files.edit import EditTool
from general_agent_server.tools.runtime import MutatingTool, ToolFailure
from tests.unit.tools.file_support import SECRET, Layout, make_layout, run_details, run_failure, run_text

NOT_FOUND = (
    "Could not find the exact text in {p}. The old text must match exactly including all whitespace and newlines."
)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def put(layout: Layout, name: str, data: bytes) -> Path:
    path = layout.workspace / name
    path.write_bytes(data)
    return path


async def test_exact_edit_with_numbered_diff(layout: Layout) -> None:
    path = put(layout, "app.py", b"import os\n\n\ndef main():\n    print('hi')\n    return 0\n")
    text, details = await run_details(
        EditTool(), layout, path="app.py", oldText="    print('hi')\n", newText="    print('hello')\n    log()\n"
    )
    assert text == (
        "Successfully replaced text in app.py.\n\n"
        " 1 import os\n"
        " 2 \n"
        " 3 \n"
        " 4 def main():\n"
        "-5     print('hi')\n"
        "+5     print('hello')\n"
        "+6     log()\n"
        " 6     return 0"
    )
    assert details == {"path": "app.py", "first_changed_line": 5, "fuzzy_match": False}
    assert path.read_bytes() == b"import os\n\n\ndef main():\n    print('hello')\n    log()\n    return 0\n"


async def test_diff_leaves_out_distant_unchanged_lines(layout: Layout) -> None:
    lines = [f"line {n}" for n in range(1, 31)]
    put(layout, "long.txt", ("\n".join(lines) + "\n").encode())
    text = await run_text(EditTool(), layout, path="long.txt", oldText="line 15\n", newText="LINE 15\n")
    diff = text.split("\n\n", 1)[1].splitlines()
    assert diff == [
        "    ...",
        " 11 line 11",
        " 12 line 12",
        " 13 line 13",
        " 14 line 14",
        "-15 line 15",
        "+15 LINE 15",
        " 16 line 16",
        " 17 line 17",
        " 18 line 18",
        " 19 line 19",
        "    ...",
    ]


async def test_reference_error_messages(layout: Layout) -> None:
    put(layout, "a.txt", b"one\ntwo\none\n")
    tool = EditTool()
    assert await run_failure(tool, layout, path="nope.txt", oldText="x", newText="y") == "File not found: nope.txt"
    assert await run_failure(tool, layout, path="a.txt", oldText="three", newText="y") == NOT_FOUND.format(p="a.txt")
    assert await run_failure(tool, layout, path="a.txt", oldText="one", newText="1") == (
        "Found 2 occurrences of the text in a.txt. The text must be unique. Please provide more context to make it "
        "unique."
    )
    assert await run_failure(tool, layout, path="a.txt", oldText="two", newText="two") == (
        "No changes made to a.txt. The replacement produced identical content."
    )
    assert (
        await run_failure(tool, layout, path="a.txt", oldText="", newText="x") == "oldText must not be empty in a.txt."
    )
    (layout.workspace / "dir").mkdir()
    assert await run_failure(tool, layout, path="dir", oldText="x", newText="y") == "dir is a directory"
    put(layout, "latin1.txt", "café".encode("latin-1"))
    assert await run_failure(tool, layout, path="latin1.txt", oldText="caf", newText="x") == (
        "latin1.txt is not UTF-8 text"
    )
    assert (layout.workspace / "a.txt").read_bytes() == b"one\ntwo\none\n"


async def test_crlf_and_bom_are_preserved(layout: Layout) -> None:
    path = put(layout, "win.txt", b"\xef\xbb\xbfalpha\r\nbeta\r\ngamma\r\n")
    text = await run_text(EditTool(), layout, path="win.txt", oldText="beta\ngamma", newText="BETA\r\nGAMMA\nDELTA")
    assert text.startswith("Successfully replaced text in win.txt.\n\n")
    assert path.read_bytes() == b"\xef\xbb\xbfalpha\r\nBETA\r\nGAMMA\r\nDELTA\r\n"
    # An LF file stays LF, even when the model sends CRLF.
    lf = put(layout, "unix.txt", b"a\nb\n")
    await run_text(EditTool(), layout, path="unix.txt", oldText="a\r\nb", newText="x\r\ny")
    assert lf.read_bytes() == b"x\ny\n"


@pytest.mark.parametrize(
    ("original", "old_text", "new_text", "expected"),
    [
        # Smart quotes in the file, ASCII in oldText.
        ("say “hi” and ‘bye’\n", "say \"hi\" and 'bye'", "said", "said\n"),
        # Unicode dashes and special spaces.
        ("a – b — c\u00a0d\n", "a - b - c d", "x", "x\n"),
        # Trailing whitespace in the file that oldText lacks (inside the span it is replaced with it).
        ("first   \nsecond\t\nthird\n", "first\nsecond", "1\n2", "1\n2\t\nthird\n"),
        # NFKC: a ligature and full-width letters in the file.
        ("the ﬁle ＡＢＣ\n", "the file ABC", "done", "done\n"),
    ],
)
async def test_tolerant_matching_replaces_only_the_matched_span(
    layout: Layout, original: str, old_text: str, new_text: str, expected: str
) -> None:
    # The rest of the file keeps its exact characters: only the span the tolerant match covers is replaced.
    untouched = "keep “these” quotes – and\u00a0spaces  \n"
    path = put(layout, "f.txt", (untouched + original + untouched).encode())
    text, details = await run_details(EditTool(), layout, path="f.txt", oldText=old_text, newText=new_text)
    assert text.startswith("Successfully replaced text in f.txt.")
    assert details["fuzzy_match"] is True
    assert path.read_bytes().decode() == untouched + expected + untouched


async def test_tolerant_matches_follow_the_unique_rule(layout: Layout) -> None:
    put(layout, "q.txt", "“x”\n“x”\n".encode())
    message = await run_failure(EditTool(), layout, path="q.txt", oldText='"x"', newText="y")
    assert message.startswith("Found 2 occurrences of the text in q.txt.")
    # An exact match is preferred: one exact occurrence wins over tolerant look-alikes.
    path = put(layout, "mixed.txt", 'a "x"\nb “x”\n'.encode())
    await run_text(EditTool(), layout, path="mixed.txt", oldText='"x"', newText="'y'")
    assert path.read_bytes().decode() == "a 'y'\nb “x”\n"


async def test_edit_escapes_are_refused(layout: Layout) -> None:
    os.symlink(layout.outside, layout.workspace / "out")
    os.symlink(layout.outside / "secret.txt", layout.workspace / "secret_link")
    for path in ["../outside/secret.txt", str(layout.outside / "secret.txt"), "out/secret.txt", "secret_link"]:
        message = await run_failure(EditTool(), layout, path=path, oldText="top secret", newText="public")
        assert message.startswith(f"Path escapes workspace root: {path}")
        assert SECRET not in message
        with pytest.raises(ToolFailure, match="Path escapes workspace root"):
            EditTool().touched_paths({"path": path, "oldText": "a", "newText": "b"}, layout.context)
    assert (layout.outside / "secret.txt").read_text() == SECRET


def test_edit_is_a_mutating_tool(layout: Layout) -> None:
    tool = EditTool()
    assert isinstance(tool, MutatingTool)
    assert not tool.spec.read_only
    assert tool.touched_paths({"path": "x/y.txt", "oldText": "", "newText": ""}, layout.context) == [
        layout.workspace / "x" / "y.txt"
    ]
