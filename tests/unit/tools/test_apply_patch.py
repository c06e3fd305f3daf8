"""`apply_patch`: the patch format and its messages, line matching from exact to punctuation-
normalised, moves, CRLF/BOM kept, the whole patch validated before any file changes, every escape refused,
and the paths it names for checkpoints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from general_agent_server.tools.files.apply_patch import ApplyPatchTool
from general_agent_server.tools.files.patch_format import AddFile, DeleteFile, UpdateChunk, UpdateFile, parse_patch
from general_agent_server.tools.runtime import MutatingTool, ToolFailure
from tests.unit.tools.file_support import SECRET, Layout, make_layout, run_details, run_failure, run_text


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


def files(layout: Layout) -> dict[str, bytes]:
    return {
        str(path.relative_to(layout.workspace)): path.read_bytes()
        for path in sorted(layout.workspace.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


# ---------------------------------------------------------------- the format


def test_parse_every_hunk_kind() -> None:
    hunks = parse_patch(
        patch(
            "*** Add File: new.txt",
            "+hello",
            "+",
            "*** Delete File: old.txt",
            "*** Update File: src/a.py",
            "*** Move to: src/b.py",
            "@@ def f():",
            "-    return 1",
            "+    return 2",
            "@@",
            " tail",
            "+more",
            "*** End of File",
        )
    )
    assert hunks == [
        AddFile(path="new.txt", contents="hello\n\n"),
        DeleteFile(path="old.txt"),
        UpdateFile(
            path="src/a.py",
            move_path="src/b.py",
            chunks=[
                UpdateChunk(change_context="def f():", old_lines=["    return 1"], new_lines=["    return 2"]),
                UpdateChunk(change_context=None, old_lines=["tail"], new_lines=["tail", "more"], is_end_of_file=True),
            ],
        ),
    ]


def test_heredoc_wrapper_and_crlf_patches_are_accepted() -> None:
    wrapped = "<<'EOF'\n" + patch("*** Delete File: a.txt") + "\nEOF"
    assert parse_patch(wrapped) == [DeleteFile(path="a.txt")]
    assert parse_patch(patch("*** Delete File: a.txt").replace("\n", "\r\n")) == [DeleteFile(path="a.txt")]
    # The first chunk may omit its @@ line.
    assert parse_patch(patch("*** Update File: a.txt", "-x", "+y")) == [
        UpdateFile(path="a.txt", move_path=None, chunks=[UpdateChunk(None, ["x"], ["y"])])
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Provide a patch input."),
        ("   \n", "Provide a patch input."),
        ("*** Delete File: a\n*** End Patch", "The first line of the patch must be '*** Begin Patch'"),
        ("*** Begin Patch\n*** Delete File: a", "The last line of the patch must be '*** End Patch'"),
        ("*** Begin Patch\n*** End Patch", "No files were modified."),
        (
            patch("*** Frobnicate: a"),
            "Invalid patch hunk at line 2: '*** Frobnicate: a' is not a valid hunk header. Valid hunk headers: "
            "'*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'",
        ),
        (
            patch("*** Update File: a.txt"),
            "Invalid patch hunk at line 2: Update file hunk for path 'a.txt' is empty",
        ),
        (
            patch("*** Update File: a.txt", "@@"),
            "Invalid patch hunk at line 4: Update hunk does not contain any lines",
        ),
        (
            patch("*** Update File: a.txt", "garbage"),
            "Invalid patch hunk at line 4: Unexpected line found in update hunk: 'garbage'. Every line should start "
            "with ' ' (context line), '+' (added line), or '-' (removed line)",
        ),
        (
            patch("*** Update File: a.txt", "-x", "+y", "garbage"),
            "Invalid patch hunk at line 5: Expected update hunk to start with a @@ context marker, got: 'garbage'",
        ),
    ],
)
async def test_format_errors(layout: Layout, text: str, message: str) -> None:
    assert await run_failure(ApplyPatchTool(), layout, input=text) == message
    with pytest.raises(ToolFailure) as raised:
        ApplyPatchTool().touched_paths({"input": text}, layout.context)
    assert raised.value.message == message


# ---------------------------------------------------------------- applying


async def test_add_update_delete_with_summary(layout: Layout) -> None:
    (layout.workspace / "app.py").write_text("import os\n\ndef f():\n    return 1\n\ndef g():\n    return 1\n")
    (layout.workspace / "old.txt").write_text("bye\n")
    text, details = await run_details(
        ApplyPatchTool(),
        layout,
        input=patch(
            "*** Add File: docs/readme.md",
            "+# Title",
            "+body",
            "*** Update File: app.py",
            "@@ def g():",
            "-    return 1",
            "+    return 2",
            "*** Delete File: old.txt",
        ),
    )
    assert text == "Success. Updated the following files:\nA docs/readme.md\nM app.py\nD old.txt"
    assert details == {"summary": {"added": ["docs/readme.md"], "modified": ["app.py"], "deleted": ["old.txt"]}}
    assert files(layout) == {
        "app.py": b"import os\n\ndef f():\n    return 1\n\ndef g():\n    return 2\n",
        "docs/readme.md": b"# Title\nbody\n",
    }


async def test_chunks_apply_in_order_and_additions_go_at_the_end(layout: Layout) -> None:
    (layout.workspace / "list.txt").write_text("a\nb\nc\nd\n")
    await run_text(
        ApplyPatchTool(),
        layout,
        input=patch("*** Update File: list.txt", "@@", " a", "-b", "+B", "@@", "-d", "+D", "@@", "+e", "@@", "+f"),
    )
    assert (layout.workspace / "list.txt").read_text() == "a\nB\nc\nD\ne\nf\n"


@pytest.mark.parametrize(
    ("file_line", "patch_line"),
    [
        ("    value = 1   ", "    value = 1"),  # trailing whitespace
        ("\tvalue = 1", "    value = 1"),  # leading whitespace differs
        ("    say(“hi” – now)", '    say("hi" - now)'),  # Unicode punctuation
    ],
)
async def test_lines_match_tolerantly(layout: Layout, file_line: str, patch_line: str) -> None:
    (layout.workspace / "m.py").write_text(f"start\n{file_line}\nend\n")
    await run_text(ApplyPatchTool(), layout, input=patch("*** Update File: m.py", f"-{patch_line}", "+changed"))
    assert (layout.workspace / "m.py").read_text() == "start\nchanged\nend\n"


async def test_end_of_file_anchors_the_chunk(layout: Layout) -> None:
    (layout.workspace / "r.txt").write_text("x\nend\nx\nend\n")
    await run_text(
        ApplyPatchTool(), layout, input=patch("*** Update File: r.txt", "@@", "-end", "+END", "*** End of File")
    )
    assert (layout.workspace / "r.txt").read_text() == "x\nend\nx\nEND\n"


async def test_move_writes_the_destination_and_removes_the_source(layout: Layout) -> None:
    (layout.workspace / "a.txt").write_text("one\ntwo\n")
    text, details = await run_details(
        ApplyPatchTool(), layout, input=patch("*** Update File: a.txt", "*** Move to: moved/b.txt", "-two", "+2")
    )
    assert text == "Success. Updated the following files:\nM moved/b.txt"
    assert details["summary"] == {"added": [], "modified": ["moved/b.txt"], "deleted": []}
    assert files(layout) == {"moved/b.txt": b"one\n2\n"}


async def test_crlf_and_bom_are_kept(layout: Layout) -> None:
    path = layout.workspace / "w.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\n")
    await run_text(ApplyPatchTool(), layout, input=patch("*** Update File: w.txt", " one", "-two", "+2", "+3"))
    assert path.read_bytes() == b"\xef\xbb\xbfone\r\n2\r\n3\r\n"


async def test_later_hunks_see_earlier_ones(layout: Layout) -> None:
    await run_text(
        ApplyPatchTool(),
        layout,
        input=patch("*** Add File: n.txt", "+first", "*** Update File: n.txt", "-first", "+second"),
    )
    assert files(layout) == {"n.txt": b"second\n"}
    # A file deleted by an earlier hunk is gone for later ones.
    message = await run_failure(
        ApplyPatchTool(), layout, input=patch("*** Delete File: n.txt", "*** Update File: n.txt", "-second", "+x")
    )
    assert message == "Failed to read file to update n.txt: File not found"
    assert files(layout) == {"n.txt": b"second\n"}


@pytest.mark.parametrize(
    ("hunks", "message"),
    [
        (["*** Update File: a.txt", "-nope", "+x"], "Failed to find expected lines in a.txt:\nnope"),
        (["*** Update File: a.txt", "@@ missing", "-one", "+x"], "Failed to find context 'missing' in a.txt"),
        (["*** Update File: ghost.txt", "-a", "+b"], "Failed to read file to update ghost.txt: File not found"),
        (["*** Delete File: ghost.txt"], "Failed to delete ghost.txt: File not found"),
        (["*** Delete File: dir"], "Failed to delete dir: it is not a regular file"),
        (["*** Add File: a.txt/inner", "+x"], "Not a directory: a.txt/inner"),
    ],
)
async def test_a_failing_hunk_changes_nothing(layout: Layout, hunks: list[str], message: str) -> None:
    (layout.workspace / "a.txt").write_text("one\ntwo\n")
    (layout.workspace / "dir").mkdir()
    before = files(layout)
    # Valid hunks come first: they must not be applied when a later one fails.
    text = patch("*** Add File: added.txt", "+new", "*** Update File: a.txt", "-one", "+ONE", *hunks)
    assert await run_failure(ApplyPatchTool(), layout, input=text) == message
    assert files(layout) == before


async def test_escapes_are_refused_and_change_nothing(layout: Layout) -> None:
    (layout.workspace / "a.txt").write_text("one\n")
    os.symlink(layout.outside, layout.workspace / "out")
    os.symlink(layout.outside / "secret.txt", layout.workspace / "secret_link")
    cases = [
        ("*** Add File: ../outside/evil.txt", "+x"),
        (f"*** Add File: {layout.outside}/evil.txt", "+x"),
        ("*** Add File: out/evil.txt", "+x"),
        ("*** Delete File: out/secret.txt",),
        ("*** Delete File: secret_link",),
        ("*** Update File: secret_link", "-top secret outside the workspace", "+public"),
        ("*** Update File: a.txt", "*** Move to: ../outside/moved.txt", "-one", "+two"),
    ]
    for case in cases:
        text = patch("*** Update File: a.txt", "-one", "+changed", *case)
        message = await run_failure(ApplyPatchTool(), layout, input=text)
        assert message.startswith("Path escapes workspace root: "), case
        assert "outside the workspace" in message
        with pytest.raises(ToolFailure, match="Path escapes workspace root"):
            ApplyPatchTool().touched_paths({"input": text}, layout.context)
    assert (layout.workspace / "a.txt").read_text() == "one\n"
    assert layout.outside_listing() == ["secret.txt"]
    assert (layout.outside / "secret.txt").read_text() == SECRET


def test_touched_paths_include_move_destinations_once(layout: Layout) -> None:
    (layout.workspace / "real.txt").write_text("x\n")
    os.symlink("real.txt", layout.workspace / "alias.txt")
    tool = ApplyPatchTool()
    assert isinstance(tool, MutatingTool)
    assert not tool.spec.read_only
    text = patch(
        "*** Add File: new.txt",
        "+x",
        "*** Update File: alias.txt",
        "*** Move to: dest/moved.txt",
        "-x",
        "+y",
        "*** Delete File: real.txt",
        "*** Delete File: new.txt",
    )
    ws = layout.workspace
    assert tool.touched_paths({"input": text}, layout.context) == [
        ws / "new.txt",
        ws / "real.txt",
        ws / "dest" / "moved.txt",
    ]
