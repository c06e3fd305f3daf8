"""`write`: creates parents, overwrites, reports lines as the pieces between line breaks, names what it touches,
and refuses every escape."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from general_agent_server.tools.files.write import WriteTool
from general_agent_server.tools.runtime import MutatingTool, ToolFailure
from tests.unit.tools.file_support import SECRET, Layout, make_layout, run_details, run_failure, run_text


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


async def test_write_creates_parents_and_reports_lines(layout: Layout) -> None:
    text, details = await run_details(WriteTool(), layout, path="src/pkg/mod.py", content="a = 1\nb = 2\n")
    # Lines are the pieces between line breaks: a trailing break starts an (empty) last piece.
    assert text == "Successfully wrote 3 lines to src/pkg/mod.py"
    assert details == {"path": "src/pkg/mod.py"}
    assert (layout.workspace / "src" / "pkg" / "mod.py").read_text() == "a = 1\nb = 2\n"


async def test_write_overwrites_and_keeps_unicode(layout: Layout) -> None:
    (layout.workspace / "notes.md").write_text("old content that is longer")
    text = await run_text(WriteTool(), layout, path="notes.md", content="héllo — “world”")
    assert text == "Successfully wrote 1 lines to notes.md"
    assert (layout.workspace / "notes.md").read_text(encoding="utf-8") == "héllo — “world”"
    await run_text(WriteTool(), layout, path="empty.txt", content="")
    assert (layout.workspace / "empty.txt").read_bytes() == b""


async def test_write_through_an_inner_link_writes_its_target(layout: Layout) -> None:
    (layout.workspace / "real.txt").write_text("before")
    os.symlink("real.txt", layout.workspace / "alias.txt")
    text = await run_text(WriteTool(), layout, path="alias.txt", content="after")
    assert text == "Successfully wrote 1 lines to real.txt"
    assert (layout.workspace / "real.txt").read_text() == "after"
    assert os.path.islink(layout.workspace / "alias.txt")


async def test_write_errors(layout: Layout) -> None:
    (layout.workspace / "dir").mkdir()
    (layout.workspace / "file.txt").write_text("x")
    assert await run_failure(WriteTool(), layout, path="dir", content="x") == "dir is a directory"
    assert await run_failure(WriteTool(), layout, path="file.txt/x", content="x") == "Not a directory: file.txt/x"
    assert await run_failure(WriteTool(), layout, path=" ", content="x") == "path must be a non-empty string"


async def test_write_escapes_are_refused(layout: Layout) -> None:
    os.symlink(layout.outside, layout.workspace / "out")
    os.symlink(layout.outside / "secret.txt", layout.workspace / "secret_link")
    for path in ["../outside/secret.txt", str(layout.outside / "secret.txt"), "out/secret.txt", "secret_link"]:
        message = await run_failure(WriteTool(), layout, path=path, content="pwned")
        assert message.startswith(f"Path escapes workspace root: {path}")
        with pytest.raises(ToolFailure, match="Path escapes workspace root"):
            WriteTool().touched_paths({"path": path, "content": "x"}, layout.context)
    assert (layout.outside / "secret.txt").read_text() == SECRET
    assert layout.outside_listing() == ["secret.txt"]


def test_touched_paths_are_resolved_absolute_paths(layout: Layout) -> None:
    (layout.workspace / "real.txt").write_text("x")
    os.symlink("real.txt", layout.workspace / "alias.txt")
    tool = WriteTool()
    assert isinstance(tool, MutatingTool)
    assert not tool.spec.read_only
    assert tool.touched_paths({"path": "alias.txt", "content": ""}, layout.context) == [layout.workspace / "real.txt"]
    assert tool.touched_paths({"path": "new/../n.txt", "content": ""}, layout.context) == [layout.workspace / "n.txt"]
    with pytest.raises(ToolFailure, match="path must be a non-empty string"):
        tool.touched_paths({"content": ""}, layout.context)
