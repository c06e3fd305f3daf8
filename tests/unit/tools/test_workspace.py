"""Workspace confinement checked at open: every kind of escape (`..`, absolute paths, links to files and to
directories, link chains) fails for every operation and leaves the outside untouched; links that stay inside
are followed; a link swapped in between the walk's look and the open does not redirect the open."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.workspace.workspace import Workspace, WorkspacePath, resolve_in_workspace
from tests.unit.tools.file_support import SECRET, Layout, make_layout


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    value = make_layout(tmp_path)
    ws, outside = value.workspace, value.outside
    (ws / "sub").mkdir()
    (ws / "sub" / "inside.txt").write_text("inside")
    os.symlink("../outside/secret.txt", ws / "link_out_rel")
    os.symlink(outside / "secret.txt", ws / "link_out_abs")
    os.symlink("link_out_rel", ws / "chain")
    os.symlink("../outside", ws / "dir_out")
    os.symlink("sub/../../outside", ws / "hop")
    os.symlink("..", ws / "up")
    os.symlink("sub/inside.txt", ws / "link_in")
    os.symlink(ws / "sub", ws / "dir_in_abs")
    return value


def escapes(layout: Layout) -> list[str]:
    ws, outside = layout.workspace, layout.outside
    return [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        str(outside / "secret.txt"),
        f"{ws}/../outside/secret.txt",
        "link_out_rel",
        "link_out_abs",
        "chain",
        "dir_out/secret.txt",
        "hop/secret.txt",
        "up/outside/secret.txt",
        "dir_in_abs/../../outside/secret.txt",
    ]


OPERATIONS: dict[str, Callable[[Workspace, str], Any]] = {
    "read": lambda ws, raw: ws.read_bytes(raw),
    "write": lambda ws, raw: ws.write_bytes(raw, b"overwritten"),
    "delete": lambda ws, raw: ws.delete(raw),
    "resolve": lambda ws, raw: ws.resolve(raw),
    "stat": lambda ws, raw: ws.stat(raw),
}


def open_dir(ws: Workspace, raw: str) -> None:
    with ws.open_dir(raw):
        pass


OPERATIONS["open_dir"] = open_dir


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_every_escape_fails_for_every_operation(layout: Layout, operation: str) -> None:
    workspace = Workspace(layout.workspace)
    for raw in escapes(layout):
        with pytest.raises(ToolFailure) as raised:
            OPERATIONS[operation](workspace, raw)
        message = raised.value.message
        assert message.startswith(f"Path escapes workspace root: {raw} "), (raw, message)
        assert "outside the workspace" in message
        assert SECRET not in message
    assert (layout.outside / "secret.txt").read_text() == SECRET
    assert layout.outside_listing() == ["secret.txt"]


def test_escape_messages_say_whether_a_link_led_out(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    with pytest.raises(ToolFailure, match=r"^Path escapes workspace root: \.\./x is outside the workspace$"):
        workspace.read_bytes("../x")
    with pytest.raises(ToolFailure, match=r"^Path escapes workspace root: dir_out/secret\.txt follows a symbolic link"):
        workspace.read_bytes("dir_out/secret.txt")


def test_writes_through_escaping_directory_links_create_nothing_outside(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    for raw in ["dir_out/new.txt", "hop/deeper/new.txt", "up/outside/new.txt", "../outside/new.txt"]:
        with pytest.raises(ToolFailure, match="Path escapes workspace root"):
            workspace.write_bytes(raw, b"x")
    assert layout.outside_listing() == ["secret.txt"]


def test_links_that_stay_inside_are_followed(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    data, path = workspace.read_bytes("link_in")
    assert (data, path.parts, path.display) == (b"inside", ("sub", "inside.txt"), "sub/inside.txt")
    assert workspace.read_bytes("dir_in_abs/inside.txt")[1].display == "sub/inside.txt"
    assert workspace.read_bytes(str(layout.workspace / "link_in"))[0] == b"inside"
    assert workspace.resolve("sub/../link_in").absolute == layout.workspace / "sub" / "inside.txt"
    # A path that leaves the workspace is refused even when it would come back in.
    for raw in ["up/ws/sub/inside.txt", "../ws/sub/inside.txt"]:
        with pytest.raises(ToolFailure, match="Path escapes workspace root"):
            workspace.resolve(raw)


def test_operations_act_on_the_link_target_never_the_link(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    assert workspace.write_bytes("link_in", b"rewritten").display == "sub/inside.txt"
    assert os.path.islink(layout.workspace / "link_in")
    assert (layout.workspace / "sub" / "inside.txt").read_bytes() == b"rewritten"
    assert workspace.delete("link_in").display == "sub/inside.txt"
    assert os.path.islink(layout.workspace / "link_in")
    assert not (layout.workspace / "sub" / "inside.txt").exists()


def test_absolute_paths_inside_the_workspace_are_allowed(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    path = workspace.write_bytes(str(layout.workspace / "new" / "file.txt"), b"hello")
    assert path == WorkspacePath(layout.workspace, ("new", "file.txt"))
    assert workspace.read_bytes(str(layout.workspace / "new" / "file.txt"))[0] == b"hello"


def test_missing_files_directories_and_files_in_the_middle(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: workspace.read_bytes("missing.txt"), "File not found: missing.txt"),
        (lambda: workspace.read_bytes("nowhere/missing.txt"), "File not found: nowhere/missing.txt"),
        (lambda: workspace.read_bytes("sub"), "sub is a directory"),
        (lambda: workspace.read_bytes("sub/inside.txt/x"), "Not a directory: sub/inside.txt/x"),
        (lambda: workspace.write_bytes("sub", b"x"), "sub is a directory"),
        (lambda: workspace.write_bytes(".", b"x"), ". is a directory"),
        (lambda: workspace.write_bytes("sub/inside.txt/x", b"x"), "Not a directory: sub/inside.txt/x"),
        (lambda: workspace.delete("sub"), "sub is a directory"),
        (lambda: workspace.delete("nope"), "File not found: nope"),
        (lambda: workspace.resolve(""), "path must be a non-empty string without NUL characters"),
        (lambda: workspace.resolve("a\0b"), "path must be a non-empty string without NUL characters"),
    ]
    for call, message in cases:
        with pytest.raises(ToolFailure) as raised:
            call()
        assert raised.value.message == message


def test_link_loops_are_refused(layout: Layout) -> None:
    os.symlink("loop", layout.workspace / "loop")
    os.symlink("ping", layout.workspace / "pong")
    os.symlink("pong", layout.workspace / "ping")
    workspace = Workspace(layout.workspace)
    for raw in ["loop", "ping/x"]:
        with pytest.raises(ToolFailure, match=f"^Too many levels of symbolic links: {raw}$"):
            workspace.read_bytes(raw)


def test_resolve_takes_missing_names_as_written(layout: Layout) -> None:
    workspace = Workspace(layout.workspace)
    assert workspace.resolve("new/dir/../file.txt").parts == ("new", "file.txt")
    assert workspace.resolve(".").parts == ()
    # Back in an existing directory, names are looked at again: a link there is still judged.
    with pytest.raises(ToolFailure, match="follows a symbolic link outside"):
        workspace.resolve("missing/../link_out_rel")
    with pytest.raises(ToolFailure, match="is outside the workspace"):
        workspace.resolve("missing/../../x")
    assert workspace.stat("missing/x") == (None, WorkspacePath(layout.workspace, ("missing", "x")))


def test_fifos_are_refused_without_blocking(layout: Layout) -> None:
    os.mkfifo(layout.workspace / "pipe")
    with pytest.raises(ToolFailure, match=r"^pipe is not a regular file$"):
        Workspace(layout.workspace).read_bytes("pipe")


def test_writes_replace_atomically_and_keep_permissions(layout: Layout) -> None:
    target = layout.workspace / "script.sh"
    target.write_text("old")
    target.chmod(0o751)
    os.link(layout.outside / "secret.txt", layout.workspace / "hard")
    workspace = Workspace(layout.workspace)
    workspace.write_bytes("script.sh", b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    # A hard link planted in the workspace is replaced, not written through.
    workspace.write_bytes("hard", b"changed")
    assert (layout.workspace / "hard").read_bytes() == b"changed"
    assert (layout.outside / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in layout.workspace.iterdir() if p.name.endswith(".tmp")) == []


def test_a_missing_workspace_is_created_by_writes_only(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "later")
    with pytest.raises(ToolFailure, match=r"^File not found: a\.txt$"):
        workspace.read_bytes("a.txt")
    assert workspace.resolve("a/b.txt").parts == ("a", "b.txt")
    assert workspace.stat("a.txt")[0] is None
    workspace.write_bytes("a/b.txt", b"x")
    assert (tmp_path / "later" / "a" / "b.txt").read_bytes() == b"x"


def test_resolve_in_workspace_returns_the_resolved_absolute_path(layout: Layout) -> None:
    assert resolve_in_workspace(layout.workspace, "link_in") == layout.workspace / "sub" / "inside.txt"
    assert resolve_in_workspace(layout.workspace, "sub") == layout.workspace / "sub"
    with pytest.raises(ToolFailure, match="outside the workspace"):
        resolve_in_workspace(layout.workspace, "dir_out")


# ---------------------------------------------------------------- swaps between the look and the open


def swap_before(monkeypatch: pytest.MonkeyPatch, function: str, name: str, swap: Callable[[], None]) -> list[str]:
    """Patches os.<function> so that the first call on `name` runs `swap` right before the real call: what a
    concurrent process changing the workspace would do at the worst moment."""
    real = getattr(os, function)
    calls: list[str] = []

    def patched(path: Any, *args: Any, **kwargs: Any) -> Any:
        if path == name and not calls:
            calls.append(name)
            swap()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, function, patched)
    return calls


def test_a_directory_swapped_for_an_escaping_link_before_its_open_is_refused(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = layout.workspace

    def swap() -> None:
        os.rename(ws / "sub", ws / "sub_moved")
        os.symlink(layout.outside, ws / "sub")

    calls = swap_before(monkeypatch, "open", "sub", swap)
    with pytest.raises(ToolFailure, match=r"^Path escapes workspace root: sub/secret\.txt follows a symbolic link"):
        Workspace(ws).read_bytes("sub/secret.txt")
    assert calls == ["sub"]


def test_a_file_swapped_for_an_escaping_link_before_its_open_is_refused(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = layout.workspace
    (ws / "target.txt").write_text("harmless")

    def swap() -> None:
        os.unlink(ws / "target.txt")
        os.symlink(layout.outside / "secret.txt", ws / "target.txt")

    calls = swap_before(monkeypatch, "open", "target.txt", swap)
    with pytest.raises(ToolFailure, match=r"^Path escapes workspace root: target\.txt follows a symbolic link"):
        Workspace(ws).read_bytes("target.txt")
    assert calls == ["target.txt"]


def test_a_link_swapped_in_before_a_write_is_replaced_not_followed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = layout.workspace
    (ws / "target.txt").write_text("old")
    real_replace = os.replace
    swapped: list[bool] = []

    def replace(source: Any, destination: Any, **kwargs: Any) -> None:
        if destination == "target.txt" and not swapped:
            swapped.append(True)
            os.unlink(ws / "target.txt")
            os.symlink(layout.outside / "secret.txt", ws / "target.txt")
        real_replace(source, destination, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    Workspace(ws).write_bytes("target.txt", b"new")
    assert swapped == [True]
    assert not os.path.islink(ws / "target.txt")
    assert (ws / "target.txt").read_bytes() == b"new"
    assert (layout.outside / "secret.txt").read_text() == SECRET


def test_an_unborn_workspace_is_made_by_its_first_write(tmp_path: Path) -> None:
    """Until something is written, the root does not exist: only the root itself names an unborn root, and
    asking creates nothing; a write creates the root with the file."""
    workspace = Workspace(tmp_path / "tenant" / "session")
    assert workspace.unborn
    for raw in [".", "./", str(tmp_path / "tenant" / "session")]:
        assert workspace.names_unborn_root(raw), raw
    for raw in ["sub", "a.txt", "sub/b.txt"]:
        assert not workspace.names_unborn_root(raw), raw
    assert not (tmp_path / "tenant").exists()
    workspace.write_bytes("notes.md", b"x")
    assert not workspace.unborn
    assert not workspace.names_unborn_root(".")
    assert (tmp_path / "tenant" / "session" / "notes.md").read_bytes() == b"x"
