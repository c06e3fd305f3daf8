"""Listing the regular files below a directory descriptor, for glob and grep's in-process search.

os.fwalk never follows symbolic links (it opens each directory relative to its parent's descriptor and
checks it is the directory it listed), and links are left out of the results, so nothing outside the
workspace is reached through a link. Version-control directories are skipped, as grep's ripgrep run skips them."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

# Skipped by name wherever they are, by both grep implementations and glob.
SKIPPED_NAMES = frozenset({".git", ".hg", ".svn"})


@dataclass(frozen=True, slots=True)
class WalkedFile:
    parts: tuple[str, ...]  # names below the walked directory
    dir_fd: int  # open while the walk is at this file's directory
    mtime_ns: int

    @property
    def relative(self) -> str:
        return "/".join(self.parts)


def regular_files(base_fd: int, skip_dir: Callable[[str], bool] | None = None) -> Iterator[WalkedFile]:
    """Regular files below the directory `base_fd`, directory by directory. `skip_dir` may prune directories
    (it gets their path relative to the base)."""
    for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=base_fd, follow_symlinks=False):
        prefix = PurePosixPath(dirpath).parts
        dirnames[:] = [
            name
            for name in dirnames
            if name not in SKIPPED_NAMES and (skip_dir is None or not skip_dir("/".join((*prefix, name))))
        ]
        for name in filenames:
            if name in SKIPPED_NAMES:
                continue
            try:
                info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            if stat.S_ISREG(info.st_mode):
                yield WalkedFile(parts=(*prefix, name), dir_fd=dirfd, mtime_ns=info.st_mtime_ns)


def printable(name: str) -> str:
    """A file name as text the model and protobuf can carry (undecodable bytes become U+FFFD)."""
    return os.fsencode(name).decode("utf-8", errors="replace")
