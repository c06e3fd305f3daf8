"""Who `exec` commands run as, so that they cannot read the server's secrets.

A command must not read the server's environment (/proc/<pid>/environ shows the environment a process
started with, so clearing os.environ later would not help), its memory (/proc/<pid>/mem, ptrace), or the files
only the server may read (the 0700 state directory, key files). The kernel guards those /proc files with the
ptrace access check, which a process of the same user passes unless the target is non-dumpable, and a process
holding CAP_SYS_PTRACE always passes. So:

- A server run as a normal user runs commands as that same user and makes itself non-dumpable at start-up
  (hardening.py): its /proc files then answer "Permission denied" to them.
- A server run as root cannot rely on that, since root commands hold CAP_SYS_PTRACE. Dropping capabilities
  alone would leave them uid 0, the owner of the state database and the key files; so commands run as an
  unprivileged user instead (`exec_user`, default `nobody`): another uid, no capabilities, and no_new_privs
  set, so no way back to root through a set-user-ID program. Background processes and everything a command
  starts inherit all of that.

The switch is made by `setpriv` (util-linux) between the fork and the shell: switching users in the forked
child from Python (subprocess's `user=`) makes subprocess fork instead of vfork, and a fork of a process
running gRPC's threads can crash the child.

That user needs the workspace: the first command run in a workspace hands it over (the entries the server
created become the user's), and from then on files the server writes there take their directory's owner
(workspace/confined_walk.py take_owner). Its HOME is the workspace, since `nobody` has none."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_EXEC_USER = "nobody"
# Where setpriv lives on common distributions, in case the server's PATH is minimal.
SETPRIV_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


class CommandUserError(ValueError):
    """The exec_user setting cannot be honoured; the message names the setting."""


@dataclass(frozen=True, slots=True)
class CommandUser:
    """An unprivileged user commands switch to (only a root server switches)."""

    name: str
    uid: int
    gid: int
    setpriv: str

    def argv(self, program: Sequence[str]) -> list[str]:
        """`program` run as this user: no supplementary groups, no capabilities (leaving uid 0 clears the
        permitted, effective and ambient sets; the inheritable one is cleared too), no new privileges. The
        bounding set is left alone: clearing it needs CAP_SETPCAP, which a container may not grant, and with
        no_new_privs nothing can be gained through it."""
        return [
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
            *program,
        ]

    def environment(self, home: Path) -> dict[str, str]:
        return {"HOME": str(home), "USER": self.name, "LOGNAME": self.name}


def command_user(setting: str) -> CommandUser | None:
    """The user commands run as; None when they run as the server's own user (a normal-user server, or a root
    server told `exec_user = root`, which gives up this protection)."""
    if os.geteuid() != 0:
        if setting and _lookup(setting)[1] != os.geteuid():
            raise CommandUserError(f"exec_user: running commands as {setting!r} needs the server to run as root")
        return None
    name, uid, gid = _lookup(setting or DEFAULT_EXEC_USER)
    if uid == 0:
        return None
    setpriv = shutil.which("setpriv", path=f"{os.environ.get('PATH', '')}:{SETPRIV_PATH}")
    if setpriv is None:
        raise CommandUserError(
            f"exec_user: running commands as {name!r} needs setpriv (util-linux); install it, or set "
            "exec_user = root to let commands run as root"
        )
    return CommandUser(name=name, uid=uid, gid=gid, setpriv=setpriv)


def _lookup(setting: str) -> tuple[str, int, int]:
    """(name, uid, gid) of a user name or numeric uid; a uid without a passwd entry uses the same gid."""
    try:
        entry = pwd.getpwuid(int(setting)) if setting.isdigit() else pwd.getpwnam(setting)
    except KeyError:
        if setting.isdigit():
            return setting, int(setting), int(setting)
        raise CommandUserError(f"exec_user: no such user {setting!r}") from None
    return entry.pw_name, entry.pw_uid, entry.pw_gid


def hand_over(workspace: Path, user: CommandUser) -> None:
    """Gives `user` the workspace and what the server created in it, once: a workspace whose root is already
    the user's is left as it is. Entries of other owners stay theirs. Links are changed themselves, never
    followed, so nothing outside the workspace changes hands."""
    if os.stat(workspace).st_uid == user.uid:
        return
    server_uid = os.geteuid()
    for _root, dirs, files, root_fd in os.fwalk(workspace, follow_symlinks=False):
        for name in (*dirs, *files):
            try:
                if os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_uid == server_uid:
                    os.chown(name, user.uid, user.gid, dir_fd=root_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile by a command still running
    os.chown(workspace, user.uid, user.gid)


def unreachable_from(path: Path, user: CommandUser) -> Path | None:
    """The first existing directory on the way to `path` that `user` may not search, if any: commands then
    work in the workspace through relative paths only (they start in it), and HOME, an absolute path, fails."""
    for directory in (*reversed(path.parents), path):
        try:
            info = os.stat(directory)
        except FileNotFoundError:
            return None  # created later by the server, searchable by default
        if info.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == user.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None
