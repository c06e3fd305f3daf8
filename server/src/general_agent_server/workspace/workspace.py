"""Workspace confinement, checked at open (docs/tools.md, the workspace): every file tool reaches its files through
`Workspace`.

A path is walked from a descriptor of the workspace root without letting the kernel follow links
(confined_walk.py), and the final file is then opened, replaced or deleted relative to its directory's
descriptor, again without following links. So a link swapped in after a check cannot redirect the open.
Symbolic links inside the workspace that stay inside are followed; any that lead out are refused, like `..`
above the root and absolute paths elsewhere ("Path escapes workspace root: ...").

Operations act on the file a path names once links are resolved; links themselves are never written or
deleted. Writes replace files atomically (a temporary file renamed over the target): a reader never sees half
a file, and a hard link planted in the workspace is replaced rather than written through."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from general_agent_server.tools.runtime import ToolFailure
from general_agent_server.workspace.confined_walk import DIR_FLAGS, ConfinedWalk, Missing, take_owner

# Attempts at an open whose target keeps turning into a link between the walk and the open.
_OPEN_ATTEMPTS = 3
# O_NONBLOCK: opening a FIFO planted in the workspace must not hang the server (it is refused after fstat).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True, slots=True)
class WorkspacePath:
    """A path inside the workspace with every symbolic link resolved: `parts` are real names below `root`."""

    root: Path
    parts: tuple[str, ...]

    @property
    def absolute(self) -> Path:
        return self.root.joinpath(*self.parts)

    @property
    def display(self) -> str:
        """Workspace-relative, as the model and hosts see it ("." for the workspace itself)."""
        return "/".join(self.parts) or "."


@dataclass(frozen=True, slots=True)
class _Located:
    dir_fd: int  # the open directory holding the target; -1 when that directory does not exist
    name: str  # the target's name in it ("." for the workspace itself)
    path: WorkspacePath


class Workspace:
    """The files of one session's workspace, reachable only through confined opens."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self._roots = (self.root, Path(os.path.abspath(root)))

    @property
    def unborn(self) -> bool:
        """Whether the root does not exist yet. A session's workspace is created by the first tool that writes
        into it (write, edit, apply_patch, exec), not before: until then it is empty."""
        return not os.path.isdir(self.root)

    def names_unborn_root(self, raw: str | WorkspacePath) -> bool:
        """Whether `raw` is the root of a workspace that does not exist yet (an empty directory to a search)."""
        return self.unborn and not self.resolve(raw).parts

    def resolve(self, raw: str | WorkspacePath) -> WorkspacePath:
        """Where `raw` leads, links resolved; names that do not exist yet are taken as written."""
        with self._locate(raw, Missing.ASSUME) as located:
            return located.path

    def stat(self, raw: str | WorkspacePath) -> tuple[os.stat_result | None, WorkspacePath]:
        """The status of what `raw` leads to (None when nothing is there)."""
        with self._locate(raw, Missing.ASSUME) as located:
            if located.dir_fd < 0:
                return None, located.path
            try:
                return os.stat(located.name, dir_fd=located.dir_fd, follow_symlinks=False), located.path
            except FileNotFoundError:
                return None, located.path

    def read_bytes(self, raw: str | WorkspacePath) -> tuple[bytes, WorkspacePath]:
        """The content of a regular file."""
        shown = _shown(raw)
        for _ in range(_OPEN_ATTEMPTS):
            with self._locate(raw, Missing.FAIL) as located:
                try:
                    fd = os.open(located.name, _READ_FLAGS, dir_fd=located.dir_fd)
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        continue  # became a link after the walk looked: walk again, which judges the link
                    raise _failure(exc, shown) from None
                with os.fdopen(fd, "rb") as file:
                    mode = os.fstat(file.fileno()).st_mode
                    if stat.S_ISDIR(mode):
                        raise ToolFailure(f"{shown} is a directory")
                    if not stat.S_ISREG(mode):
                        raise ToolFailure(f"{shown} is not a regular file")
                    return file.read(), located.path
        raise ToolFailure(f"{shown} kept changing while it was being opened")

    def write_bytes(self, raw: str | WorkspacePath, data: bytes) -> WorkspacePath:
        """Creates missing parent directories, then replaces the file atomically, keeping its permissions."""
        shown = _shown(raw)
        with self._locate(raw, Missing.CREATE) as located:
            if located.name == ".":
                raise ToolFailure(f"{shown} is a directory")
            try:
                _replace(located.dir_fd, located.name, data)
            except OSError as exc:
                raise _failure(exc, shown) from None
            return located.path

    def delete(self, raw: str | WorkspacePath) -> WorkspacePath:
        """Removes a file (never a directory)."""
        shown = _shown(raw)
        with self._locate(raw, Missing.FAIL) as located:
            try:
                if located.name == "." or stat.S_ISDIR(
                    os.stat(located.name, dir_fd=located.dir_fd, follow_symlinks=False).st_mode
                ):
                    raise ToolFailure(f"{shown} is a directory")
                # unlink never follows a link: if one was swapped in since the walk, only that link goes.
                os.unlink(located.name, dir_fd=located.dir_fd)
            except OSError as exc:
                raise _failure(exc, shown) from None
            return located.path

    @contextmanager
    def open_dir(self, raw: str | WorkspacePath) -> Iterator[tuple[int, WorkspacePath]]:
        """A descriptor of a directory in the workspace, open for the block (for os.fwalk, or as a process's
        working directory through /proc/self/fd)."""
        shown = _shown(raw)
        fd = -1
        for _ in range(_OPEN_ATTEMPTS):
            with self._locate(raw, Missing.FAIL) as located:
                try:
                    fd = os.open(located.name, DIR_FLAGS, dir_fd=located.dir_fd)
                except OSError as exc:
                    if exc.errno == errno.ENOTDIR and _is_link(located.dir_fd, located.name):
                        continue
                    if exc.errno == errno.ENOTDIR:
                        raise ToolFailure(f"{shown} is not a directory") from None
                    raise _failure(exc, shown) from None
                path = located.path
                break
        else:
            raise ToolFailure(f"{shown} kept changing while it was being opened")
        try:
            yield fd, path
        finally:
            os.close(fd)

    @contextmanager
    def _locate(self, raw: str | WorkspacePath, missing: Missing) -> Iterator[_Located]:
        """Walks `raw` from the root and yields where its target is; the directories opened on the way stay
        open for the block."""
        shown = _shown(raw)
        walk = ConfinedWalk(self._roots, shown, missing)
        relative = ("/".join(raw.parts) or ".") if isinstance(raw, WorkspacePath) else raw
        try:
            if missing is Missing.CREATE:
                self.root.mkdir(parents=True, exist_ok=True)
            try:
                root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except FileNotFoundError:
                if missing is Missing.FAIL:
                    raise ToolFailure(f"File not found: {shown}") from None
                root_fd = -1  # nothing exists yet: the walk takes the path as written
            try:
                walk.run(root_fd, relative)
                dir_fd, name = walk.holder()
                yield _Located(dir_fd=dir_fd, name=name, path=WorkspacePath(self.root, tuple(walk.names)))
            finally:
                walk.close()
                if root_fd >= 0:
                    os.close(root_fd)
        except OSError as exc:
            raise _failure(exc, shown) from None


def resolve_in_workspace(workspace: Path, raw_path: str) -> Path:
    """The absolute path `raw_path` leads to inside `workspace`, links resolved (ToolFailure if it escapes).
    Only for handing a path to something that cannot take a descriptor (a process's working directory):
    file tools open through `Workspace` instead."""
    return Workspace(workspace).resolve(raw_path).absolute


def _shown(raw: str | WorkspacePath) -> str:
    return raw.display if isinstance(raw, WorkspacePath) else raw


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _replace(dir_fd: int, name: str, data: bytes) -> None:
    try:
        existing: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
    # A short name: the target's own name may already be at the file system's length limit.
    temporary = f".ga-{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o666, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            # A replaced file keeps its mode and owner; a new one takes its directory's owner.
            if existing is not None and stat.S_ISREG(existing.st_mode):
                os.fchmod(file.fileno(), stat.S_IMODE(existing.st_mode))
                take_owner(existing, fd=file.fileno())
            else:
                take_owner(os.fstat(dir_fd), fd=file.fileno())
        # rename replaces whatever is at `name` (a link swapped in included) and never follows it.
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _failure(exc: OSError, shown: str) -> ToolFailure:
    if isinstance(exc, FileNotFoundError):
        return ToolFailure(f"File not found: {shown}")
    if isinstance(exc, IsADirectoryError):
        return ToolFailure(f"{shown} is a directory")
    if isinstance(exc, NotADirectoryError):
        return ToolFailure(f"Not a directory: {shown}")
    if isinstance(exc, PermissionError):
        return ToolFailure(f"Permission denied: {shown}")
    return ToolFailure(f"{shown}: {exc.strerror or exc}")
