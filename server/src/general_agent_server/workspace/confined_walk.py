"""Resolving a path below a root directory descriptor without ever letting the kernel follow a symbolic link.

Each component is looked at with lstat relative to its parent's descriptor; directories are opened with
O_NOFOLLOW relative to that descriptor, so what is opened is what was looked at (a link swapped in between
makes the open fail, and the component is looked at again). Links are read and resolved here: a relative target
continues from the link's directory, an absolute one must name something inside the root, and `..` never goes
above the root (a path that leaves the root is refused even if it would come back in). So every name the walk
ends on lies inside the root, whatever links the path contains."""

from __future__ import annotations

import enum
import errno
import os
import stat
from collections import deque
from contextlib import suppress
from pathlib import Path, PurePosixPath

from general_agent_server.tools.runtime import ToolFailure

# The kernel's own limit on links followed while resolving one path; the walk also counts a component that
# changed under it against this, so a path that keeps changing cannot keep it busy.
MAX_LINK_HOPS = 40
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Missing(enum.Enum):
    """What the walk does with a component that does not exist."""

    FAIL = "fail"  # the target must exist (read, delete, list)
    CREATE = "create"  # directories on the way are created (write); the final name may be missing
    ASSUME = "assume"  # resolve only: the rest of the path is taken as written


class _Tail(enum.Enum):
    """What the names past the open directories are."""

    NONE = "none"  # every name is an open directory
    FILE = "file"  # the last name exists and is not a directory
    MISSING = "missing"  # the names from here on do not exist


def path_escapes(shown: str, *, via_link: bool) -> ToolFailure:
    if via_link:
        return ToolFailure(f"Path escapes workspace root: {shown} follows a symbolic link outside the workspace")
    return ToolFailure(f"Path escapes workspace root: {shown} is outside the workspace")


class ConfinedWalk:
    """One walk of one path. `names` are the real names below the root it ended on; the directories among
    them stay open until close()."""

    def __init__(self, roots: tuple[Path, ...], shown: str, missing: Missing) -> None:
        self._roots = roots  # the root's real path first, then the path it was given as
        self._shown = shown
        self._missing = missing
        self.names: list[str] = []
        self._fds: list[int] = []  # _fds[i] is the open directory names[: i + 1]
        self._tail = _Tail.NONE
        self._hops = 0
        self._via_link = False
        self._root_fd = -1

    def run(self, root_fd: int, raw: str) -> None:
        """Walks `raw` from the root (root_fd -1: the root does not exist yet, the path is taken as written)."""
        self._root_fd = root_fd
        if root_fd < 0:
            self._tail = _Tail.MISSING
        pending = deque(self.components_below_root(raw, via_link=False))
        while pending:
            name = pending.popleft()
            if name in ("", "."):
                continue
            if self._tail is _Tail.FILE:
                raise ToolFailure(f"Not a directory: {self._shown}")
            if name == "..":
                self._up()
            elif self._tail is _Tail.MISSING:
                self.names.append(name)  # only in ASSUME mode: a missing name fails or is created otherwise
            else:
                self._step(name, pending)

    def holder(self) -> tuple[int, str]:
        """The open directory that holds the target and the target's name in it ("." for the root itself);
        the descriptor is -1 when the target's directory does not exist."""
        count = len(self.names)
        if count == 0:
            return self._root_fd, "."
        if len(self._fds) == count:  # the target is itself an open directory
            return (self._fds[-2] if count >= 2 else self._root_fd), self.names[-1]
        if len(self._fds) == count - 1:
            return (self._fds[-1] if self._fds else self._root_fd), self.names[-1]
        return -1, self.names[-1]

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def components_below_root(self, raw: str, *, via_link: bool) -> list[str]:
        """The components of `raw` relative to the root. An absolute path must name something inside the root
        (as its real path or as given); links within it are judged by the walk, not here."""
        if not raw or "\0" in raw:
            raise ToolFailure("path must be a non-empty string without NUL characters")
        if not raw.startswith("/"):
            return raw.split("/")
        path = PurePosixPath(raw)
        for root in self._roots:
            with suppress(ValueError):
                return list(path.relative_to(root).parts)
        raise path_escapes(self._shown, via_link=via_link)

    def _parent_fd(self) -> int:
        return self._fds[-1] if self._fds else self._root_fd

    def _up(self) -> None:
        if not self.names:
            raise path_escapes(self._shown, via_link=self._via_link)
        self.names.pop()
        if len(self._fds) > len(self.names):
            os.close(self._fds.pop())
        if len(self._fds) == len(self.names):
            self._tail = _Tail.NONE

    def _step(self, name: str, pending: deque[str]) -> None:
        parent = self._parent_fd()
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            self._missing_name(name, parent, pending)
            return
        if stat.S_ISLNK(info.st_mode):
            self._follow(name, parent, pending)
        elif not stat.S_ISDIR(info.st_mode):
            self.names.append(name)
            self._tail = _Tail.FILE
        else:
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP, errno.ENOENT):
                    raise
                self._count_hop()  # it changed since the lstat: look again
                pending.appendleft(name)
                return
            self._fds.append(fd)
            self.names.append(name)

    def _missing_name(self, name: str, parent: int, pending: deque[str]) -> None:
        if self._missing is Missing.FAIL:
            raise ToolFailure(f"File not found: {self._shown}")
        if self._missing is Missing.CREATE and any(part not in ("", ".") for part in pending):
            # More components follow, so this one has to be a directory.
            with suppress(FileExistsError):
                os.mkdir(name, dir_fd=parent)
                take_owner(os.fstat(parent), name=name, dir_fd=parent)
            pending.appendleft(name)  # look again: whatever is there now decides
            return
        self.names.append(name)
        self._tail = _Tail.MISSING

    def _follow(self, name: str, parent: int, pending: deque[str]) -> None:
        self._count_hop()
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError:
            pending.appendleft(name)  # no longer a link: look again
            return
        self._via_link = True
        if target.startswith("/"):
            self.close()
            self.names.clear()
            self._tail = _Tail.NONE if self._root_fd >= 0 else _Tail.MISSING
        # A relative target continues from the directory holding the link, which is where the walk stands.
        pending.extendleft(reversed(self.components_below_root(target, via_link=True)))

    def _count_hop(self) -> None:
        self._hops += 1
        if self._hops > MAX_LINK_HOPS:
            raise ToolFailure(f"Too many levels of symbolic links: {self._shown}")


def take_owner(owner: os.stat_result, *, fd: int = -1, name: str = "", dir_fd: int = -1) -> None:
    """Gives a file or directory the server just created (open as `fd`, or `name` in `dir_fd`, never followed)
    the owner and group of `owner`: the directory it was created in, or the file it replaces. Only a root server
    creates files for another user: a workspace it handed to exec's user (tools/shell/command_user.py) stays usable
    by that user's commands. A no-op otherwise."""
    if os.geteuid() != 0:
        return
    current = os.fstat(fd) if fd >= 0 else os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if (current.st_uid, current.st_gid) == (owner.st_uid, owner.st_gid):
        return
    if fd >= 0:
        os.fchown(fd, owner.st_uid, owner.st_gid)
    else:
        os.chown(name, owner.st_uid, owner.st_gid, dir_fd=dir_fd, follow_symlinks=False)
