"""`grep`, run with ripgrep and with the in-process search forced: every test runs on both, and the two must
give identical results on a varied tree."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.domain.content import TextPart
from general_agent_server.tools.files.grep import MAX_MATCHES, GrepTool
from general_agent_server.tools.files.grep_ripgrep import find_ripgrep
from tests.unit.tools.file_support import SECRET, Layout, make_layout, run_details, run_failure, run_text


def make_tool(engine: str) -> GrepTool:
    if engine == "python":
        return GrepTool(None)
    ripgrep = find_ripgrep()
    assert ripgrep is not None, "rg should be installed (the pinned ripgrep package provides it)"
    return GrepTool(ripgrep)


@pytest.fixture(params=["ripgrep", "python"])
def tool(request: pytest.FixtureRequest) -> GrepTool:
    value = make_tool(request.param)
    assert value.engine == request.param
    return value


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    value = make_layout(tmp_path)
    ws = value.workspace
    tree = {
        "a.py": "import os\ndef alpha():\n    return 'needle'\n",
        "sub/b.py": "needle = 1\nNEEDLE = 2\n",
        "sub.txt": "needle in sub.txt\n",
        "sub/deep/c.txt": "deep needle\n",
        "z.md": "no match here\n",
        ".hidden/h.py": "hidden needle\n",
        ".git/config": "needle in git\n",
        "crlf.txt": "needle\r\nother\r\n",
        "bin.dat": "needle\0binary\n",
    }
    for name, content in tree.items():
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode())
    (value.outside / "secret.txt").write_text("needle " + SECRET)
    os.symlink(value.outside, ws / "out")
    os.symlink(value.outside / "secret.txt", ws / "secret_link.txt")
    return value


async def test_matches_in_path_order(tool: GrepTool, layout: Layout) -> None:
    text, details = await run_details(tool, layout, pattern="needle")
    # Hidden files are searched; .git, binary files and links are not; files come in path order.
    assert text.splitlines() == [
        ".hidden/h.py:1:hidden needle",
        "a.py:3:    return 'needle'",
        "crlf.txt:1:needle",
        "sub/b.py:1:needle = 1",
        "sub/deep/c.txt:1:deep needle",
        "sub.txt:1:needle in sub.txt",
    ]
    assert details == {"matches": 6, "truncated": False, "engine": tool.engine}
    assert SECRET not in text


async def test_path_glob_and_case(tool: GrepTool, layout: Layout) -> None:
    assert (
        await run_text(tool, layout, pattern="needle", path="sub")
        == "sub/b.py:1:needle = 1\nsub/deep/c.txt:1:deep needle"
    )
    assert await run_text(tool, layout, pattern="needle", glob="*.txt") == (
        "crlf.txt:1:needle\nsub/deep/c.txt:1:deep needle\nsub.txt:1:needle in sub.txt"
    )
    assert (
        await run_text(tool, layout, pattern="needle", path="sub", glob="deep/*.txt") == "sub/deep/c.txt:1:deep needle"
    )
    assert await run_text(tool, layout, pattern="needle", glob="!*.py") == (
        "crlf.txt:1:needle\nsub/deep/c.txt:1:deep needle\nsub.txt:1:needle in sub.txt"
    )
    assert await run_text(tool, layout, pattern="needle", glob="!deep") == (
        ".hidden/h.py:1:hidden needle\na.py:3:    return 'needle'\ncrlf.txt:1:needle\nsub/b.py:1:needle = 1\n"
        "sub.txt:1:needle in sub.txt"
    )
    assert await run_text(tool, layout, pattern="^needle", path="sub", case_insensitive=True) == (
        "sub/b.py:1:needle = 1\nsub/b.py:2:NEEDLE = 2"
    )


async def test_a_single_file(tool: GrepTool, layout: Layout) -> None:
    text, details = await run_details(tool, layout, pattern="ne+dle", path="sub/b.py")
    assert text == "sub/b.py:1:needle = 1"
    assert details["engine"] == "python"
    assert await run_text(tool, layout, pattern="needle", path="bin.dat") == "No matches found."


async def test_crlf_lines_keep_their_cr_for_the_pattern(tool: GrepTool, layout: Layout) -> None:
    # As in ripgrep, `$` does not match before the CR of a CRLF line; the CR is not shown.
    assert await run_text(tool, layout, pattern="needle$", path=".", glob="crlf.txt") == "No matches found."
    assert await run_text(tool, layout, pattern=r"needle\r$", glob="crlf.txt") == "crlf.txt:1:needle"


async def test_no_matches_and_invalid_patterns(tool: GrepTool, layout: Layout) -> None:
    text, details = await run_details(tool, layout, pattern="absent")
    assert (text, details["matches"]) == ("No matches found.", 0)
    message = await run_failure(tool, layout, pattern="fo(o")
    assert message.startswith("Invalid regex pattern 'fo(o': ")


async def test_the_cap_and_long_lines(tool: GrepTool, layout: Layout) -> None:
    (layout.workspace / "many.log").write_text("".join(f"hit {n}\n" for n in range(MAX_MATCHES + 50)))
    (layout.workspace / "wide.log").write_text("hit " + "x" * 2000 + "\n")
    text, details = await run_details(tool, layout, pattern="hit", glob="*.log")
    lines = text.splitlines()
    assert lines[0] == "many.log:1:hit 0"
    assert lines[MAX_MATCHES - 1] == f"many.log:{MAX_MATCHES}:hit {MAX_MATCHES - 1}"
    assert (
        lines[-1] == f"[showing the first {MAX_MATCHES} matching lines; narrow the pattern, path or glob to see more]"
    )
    assert (details["matches"], details["truncated"]) == (MAX_MATCHES, True)
    wide = await run_text(tool, layout, pattern="hit", glob="wide.log")
    assert wide == "wide.log:1:hit " + "x" * 496 + "… [line truncated]"


async def test_escapes_through_path_are_refused(tool: GrepTool, layout: Layout) -> None:
    for path in ["..", "../outside", str(layout.outside), "out", "secret_link.txt", "sub/../../outside/secret.txt"]:
        message = await run_failure(tool, layout, pattern="needle", path=path)
        assert message.startswith(f"Path escapes workspace root: {path}"), path
        assert SECRET not in message
    assert await run_failure(tool, layout, pattern="x", path="nope") == "File not found: nope"


async def test_both_implementations_give_the_same_results(layout: Layout) -> None:
    ws = layout.workspace
    (ws / "unicode.txt").write_text("ünïcödé needle\nplain\n", encoding="utf-8")
    (ws / "latin1.txt").write_bytes("caf\xe9 needle\n".encode("latin-1"))
    (ws / "no_newline.txt").write_text("needle at end")
    (ws / "empty.txt").write_text("")
    (ws / "bom.txt").write_bytes(b"\xef\xbb\xbfneedle first\n")
    (ws / "utf16.txt").write_bytes("needle in utf-16\nsecond\n".encode("utf-16"))
    (ws / "sub" / "colon:name.txt").write_text("needle: with colon\n")
    queries: list[dict[str, Any]] = [
        {"pattern": "needle"},
        {"pattern": "NEEDLE", "case_insensitive": True},
        {"pattern": r"\bneedle\b", "path": "sub"},
        {"pattern": "^$"},
        {"pattern": "e.d", "glob": "**/*.py"},
        {"pattern": "needle|other", "glob": "!sub/**"},
        {"pattern": "[0-9]+"},
        {"pattern": "needle", "glob": "/sub.txt"},
        {"pattern": "^needle"},
        {"pattern": "second", "glob": "utf16.txt"},
    ]
    ripgrep, python = make_tool("ripgrep"), make_tool("python")
    found: list[str] = []
    for query in queries:
        rg_outcome = await ripgrep.run(query, layout.context)
        py_outcome = await python.run(query, layout.context)
        assert rg_outcome.content == py_outcome.content, query
        rg_details, py_details = json.loads(rg_outcome.details_json), json.loads(py_outcome.details_json)
        assert (rg_details["engine"], py_details["engine"]) == ("ripgrep", "python")
        assert rg_details["matches"] == py_details["matches"], query
        found.extend(p.text for p in rg_outcome.content if isinstance(p, TextPart))
    # Not trivially equal: the tricky files were matched.
    shown = "\n".join(found).splitlines()
    for line in [
        "bom.txt:1:needle first",
        "utf16.txt:2:second",
        "latin1.txt:1:caf\ufffd needle",
        "sub/colon:name.txt:1:needle: with colon",
    ]:
        assert line in shown
