"""`glob`: glob semantics relative to the searched directory, newest first, a cap with a notice, links neither
listed nor followed, version-control directories skipped, and escapes through `path` refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.tools.files.glob import MAX_FILES, GlobTool
from tests.unit.tools.file_support import Layout, make_layout, run_details, run_failure, run_text


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    value = make_layout(tmp_path)
    ws = value.workspace
    for index, name in enumerate(["a.py", "b.txt", "src/c.py", "src/deep/d.py", ".hidden/e.py", ".git/config.py"]):
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        os.utime(path, ns=(1_000_000_000 * (index + 1), 1_000_000_000 * (index + 1)))
    return value


async def test_patterns_and_newest_first(layout: Layout) -> None:
    tool = GlobTool()
    assert await run_text(tool, layout, pattern="*.py") == "a.py"
    assert (await run_text(tool, layout, pattern="**/*.py")).splitlines() == [
        ".hidden/e.py",
        "src/deep/d.py",
        "src/c.py",
        "a.py",
    ]
    assert await run_text(tool, layout, pattern="src/**/*.py") == "src/deep/d.py\nsrc/c.py"
    assert await run_text(tool, layout, pattern="*.{txt,md}") == "b.txt"
    assert await run_text(tool, layout, pattern="./b.txt") == "b.txt"
    text, details = await run_details(tool, layout, pattern="**/*.rs")
    assert (text, details) == ("No files found.", {"count": 0, "truncated": False})


async def test_a_pattern_of_one_directory_walks_no_directory_below_it(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`*.py` in a large tree reads the searched directory only; `**` and slashes still walk below."""
    statted: list[str] = []
    real_stat = os.stat

    def recording_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if isinstance(path, str) and path.endswith((".py", ".txt")):
            statted.append(path)  # a file's check (the walk's own calls name directories and descriptors)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", recording_stat)  # file_walk.py calls os.stat per file
    tool = GlobTool()
    assert await run_text(tool, layout, pattern="*.{py,txt}") == "b.txt\na.py"
    assert sorted(statted) == ["a.py", "b.txt"]
    statted.clear()
    assert await run_text(tool, layout, pattern="src/*.py") == "src/c.py"
    assert "c.py" in statted


async def test_path_narrows_the_search_and_results_stay_workspace_relative(layout: Layout) -> None:
    tool = GlobTool()
    assert await run_text(tool, layout, pattern="*.py", path="src") == "src/c.py"
    assert await run_text(tool, layout, pattern="**/*.py", path="src/") == "src/deep/d.py\nsrc/c.py"
    assert await run_text(tool, layout, pattern="*.py", path=str(layout.workspace / "src" / "deep")) == "src/deep/d.py"


async def test_links_are_neither_listed_nor_followed(layout: Layout) -> None:
    (layout.outside / "leak.py").write_text("x")
    os.symlink(layout.outside, layout.workspace / "out")
    os.symlink(layout.outside / "leak.py", layout.workspace / "leak.py")
    os.symlink("src", layout.workspace / "src_alias")
    listed = (await run_text(GlobTool(), layout, pattern="**/*")).splitlines()
    assert sorted(listed) == [".hidden/e.py", "a.py", "b.txt", "src/c.py", "src/deep/d.py"]


async def test_the_cap_keeps_the_newest(layout: Layout) -> None:
    many = layout.workspace / "many"
    many.mkdir()
    for index in range(MAX_FILES + 5):
        path = many / f"f{index:04}.log"
        path.write_text("")
        os.utime(path, ns=(index * 1_000_000_000, index * 1_000_000_000))
    text, details = await run_details(GlobTool(), layout, pattern="many/*.log")
    lines = text.splitlines()
    assert lines[0] == f"many/f{MAX_FILES + 4:04}.log"
    assert lines[MAX_FILES - 1] == "many/f0005.log"
    assert (
        lines[-1]
        == f"[showing the {MAX_FILES} newest of {MAX_FILES + 5} files; narrow the pattern or path to see more]"
    )
    assert len(lines) == MAX_FILES + 2
    assert details == {"count": MAX_FILES + 5, "truncated": True}


async def test_glob_errors_and_escapes(layout: Layout) -> None:
    os.symlink(layout.outside, layout.workspace / "out")
    tool = GlobTool()
    for path in ["..", "../outside", str(layout.outside), "out", "src/../../outside"]:
        message = await run_failure(tool, layout, pattern="*", path=path)
        assert message.startswith(f"Path escapes workspace root: {path}"), path
    assert await run_failure(tool, layout, pattern="*", path="a.py") == "a.py is not a directory"
    assert await run_failure(tool, layout, pattern="*", path="nope") == "File not found: nope"
    assert await run_failure(tool, layout, pattern="/etc/*") == (
        "pattern must be relative to path (give the directory to search as path)"
    )
    assert tool.spec.read_only
