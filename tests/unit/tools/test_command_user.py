"""Who exec commands run as (tools/shell/command_user.py) and how the workspace stays theirs: the setting, the
switch through setpriv, the hand-over of a workspace, and files the server writes taking their directory's
owner (workspace/confined_walk.py take_owner). These run as root, as CI does: only root switches users."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from general_agent_server.config import ConfigError, load_settings
from general_agent_server.tools.shell.command_user import CommandUserError, command_user, hand_over, unreachable_from
from general_agent_server.tools.shell.commands import ShellLauncher
from general_agent_server.tools.shell.exec import run_command
from general_agent_server.workspace.workspace import Workspace

NOBODY = 65534
OTHER = 4321  # an unprivileged uid with no passwd entry


@pytest.fixture(autouse=True)
def as_root() -> None:
    assert os.geteuid() == 0, "these tests switch users, which needs root (CI runs as root)"


def owner(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_uid, info.st_gid


def test_a_root_server_runs_commands_as_nobody_unless_told() -> None:
    user = command_user("")
    assert user is not None
    assert (user.name, user.uid) == ("nobody", NOBODY)
    assert user.argv(["sh", "-c", "true"])[-4:] == ["--", "sh", "-c", "true"]
    assert {"--clear-groups", "--no-new-privs", "--inh-caps=-all"} <= set(user.argv([]))
    numeric = command_user(str(OTHER))
    assert numeric is not None
    assert (numeric.uid, numeric.gid) == (OTHER, OTHER)
    assert command_user("root") is None
    assert command_user("0") is None


def test_an_unknown_user_is_a_configuration_error() -> None:
    with pytest.raises(CommandUserError, match="exec_user: no such user"):
        command_user("no-such-user-here")
    with pytest.raises(ConfigError, match="exec_user"):
        load_settings(None, {"GENERAL_AGENT_EXEC_USER": "no-such-user-here"})


def test_a_server_that_is_not_root_runs_commands_as_itself() -> None:
    script = (
        "from general_agent_server.tools.shell.command_user import command_user, CommandUserError\n"
        "print(command_user(''), command_user('nobody'))\n"
        "try:\n    command_user('root')\nexcept CommandUserError as exc:\n    print(exc)\n"
    )
    # CAP_DAC_READ_SEARCH only lets uid 65534 read the interpreter and the checkout wherever they are.
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--"]
    result = subprocess.run(
        [*setpriv, *caps, sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="/"
    )
    assert result.stdout.splitlines() == [
        "None None",
        "exec_user: running commands as 'root' needs the server to run as root",
    ]


def test_hand_over_gives_the_user_what_the_server_created(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside.txt"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "a.txt").write_text("a")
    (workspace / "theirs.txt").write_text("b")
    os.chown(workspace / "theirs.txt", OTHER, OTHER)
    outside.write_text("not in the workspace")
    (workspace / "link").symlink_to(outside)
    user = command_user("")
    assert user is not None
    hand_over(workspace, user)
    for path in (workspace, workspace / "src", workspace / "src" / "a.txt", workspace / "link"):
        assert owner(path) == (NOBODY, user.gid), path
    assert owner(workspace / "theirs.txt") == (OTHER, OTHER)
    assert owner(outside) == (0, 0)  # the link was not followed
    # Once handed over, the workspace is left alone (a command's own files are not walked again).
    os.chown(workspace / "src" / "a.txt", 0, 0)
    hand_over(workspace, user)
    assert owner(workspace / "src" / "a.txt") == (0, 0)


def test_files_the_server_writes_take_their_directory_owner(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, NOBODY, NOBODY)
    files = Workspace(workspace)
    files.write_bytes("new/dir/file.txt", b"x")
    for path in (workspace / "new", workspace / "new" / "dir", workspace / "new" / "dir" / "file.txt"):
        assert owner(path) == (NOBODY, NOBODY), path
    (workspace / "kept.txt").write_text("old")
    os.chown(workspace / "kept.txt", OTHER, OTHER)
    files.write_bytes("kept.txt", b"new")
    assert owner(workspace / "kept.txt") == (OTHER, OTHER)  # a replaced file keeps its owner


async def test_commands_switch_user_and_get_the_workspace_as_home(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "made-by-server.txt").write_text("server\n")
    launcher = ShellLauncher("PATH", command_user(""))
    command = (
        'id -u; id -G; echo "$HOME $USER"; echo more >> made-by-server.txt; grep NoNewPrivs /proc/self/status; '
        "grep -E 'Cap(Inh|Prm|Eff|Amb)' /proc/self/status"
    )
    completed = await run_command(launcher, command, workspace, 10.0, workspace)
    lines = completed.output.text().splitlines()
    assert completed.exit_code == 0, lines
    assert lines[:4] == [str(NOBODY), str(NOBODY), f"{workspace} nobody", "NoNewPrivs:\t1"]
    assert {line.split()[1] for line in lines[4:]} == {"0000000000000000"}  # no capabilities of any kind
    assert (workspace / "made-by-server.txt").read_text() == "server\nmore\n"


def test_a_workspace_root_the_user_cannot_reach_is_named(tmp_path: Path) -> None:
    user = command_user("")
    assert user is not None
    blocked = next(p for p in (*reversed(tmp_path.parents), tmp_path) if not os.stat(p).st_mode & 0o001)
    assert unreachable_from(tmp_path / "ws" / "default", user) == blocked  # pytest's base directory is 0700
    with tempfile.TemporaryDirectory() as open_root:
        Path(open_root).chmod(0o755)
        assert unreachable_from(Path(open_root) / "ws", user) is None
        Path(open_root).chmod(0o750)
        os.chown(open_root, 0, user.gid)
        assert unreachable_from(Path(open_root) / "ws", user) is None  # through the group
