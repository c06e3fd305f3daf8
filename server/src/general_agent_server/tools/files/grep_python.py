"""grep's search: what is asked, what is found, and the in-process implementation used when ripgrep is not
installed (or for a single file). It gives the same results as the ripgrep run (grep_ripgrep.py):

- files in path order (names compared component by component, as `rg --sort path` walks);
- regular files only, symbolic links not followed, version-control directories skipped, hidden files searched,
  ignore files not consulted;
- a UTF-8 BOM is dropped and UTF-16 with a BOM is transcoded; other bytes are read as UTF-8;
- a file containing a NUL byte is binary and skipped (ripgrep may still report matches it met before a NUL
  deep inside a large file);
- lines split at LF; the pattern sees a CRLF line's CR, as ripgrep does (so `$` does not match before it);
- the glob filter has ripgrep's meaning: relative to the searched directory, a glob without `/` matches the
  file name at any depth, a leading `!` excludes (directories included)."""

from __future__ import annotations

import codecs
import os
import re
import stat
from dataclasses import dataclass

from wcmatch import glob as wildcard

from general_agent_server.tools.files.file_walk import regular_files
from general_agent_server.tools.runtime import ToolFailure

_GLOB_FLAGS = wildcard.GLOBSTAR | wildcard.DOTGLOB | wildcard.BRACE | wildcard.CASE


@dataclass(frozen=True, slots=True)
class GrepQuery:
    pattern: str
    case_insensitive: bool = False
    glob: str | None = None
    max_matches: int = 500


@dataclass(frozen=True, slots=True)
class GrepMatch:
    path: str  # relative to the searched directory ("" when a single file was searched)
    line_number: int
    text: str  # without the line break (and without the CR of a CRLF line)


@dataclass(frozen=True, slots=True)
class GrepResult:
    matches: list[GrepMatch]
    truncated: bool  # more matches than max_matches exist


def invalid_regex(pattern: str, reason: str) -> ToolFailure:
    return ToolFailure(f"Invalid regex pattern {pattern!r}: {reason}")


class GlobFilter:
    """ripgrep's --glob semantics on paths relative to the searched directory."""

    def __init__(self, glob: str) -> None:
        self.exclude = glob.startswith("!")
        pattern = glob[1:] if self.exclude else glob
        anchored = pattern.startswith("/")
        pattern = pattern.lstrip("/")
        # Without a slash (and not anchored), a glob matches a file's name wherever it is.
        flags = _GLOB_FLAGS if anchored or "/" in pattern else _GLOB_FLAGS | wildcard.MATCHBASE
        # Compiled once: matching with the pattern text would expand its braces again for every path.
        self._matcher = wildcard.compile(pattern, flags=flags)

    def matches(self, relative: str) -> bool:
        return self._matcher.match(relative)

    def keeps_file(self, relative: str) -> bool:
        return self.matches(relative) != self.exclude

    def prunes_dir(self, relative: str) -> bool:
        return self.exclude and self.matches(relative)


def compile_pattern(query: GrepQuery) -> re.Pattern[str]:
    try:
        return re.compile(query.pattern, re.IGNORECASE if query.case_insensitive else 0)
    except re.error as exc:
        raise invalid_regex(query.pattern, str(exc)) from None


def search_tree(base_fd: int, query: GrepQuery) -> GrepResult:
    regex = compile_pattern(query)
    glob = GlobFilter(query.glob) if query.glob else None
    files = sorted(
        regular_files(base_fd, skip_dir=glob.prunes_dir if glob else None),
        key=lambda file: file.parts,
    )
    matches: list[GrepMatch] = []
    for file in files:
        if glob is not None and not glob.keeps_file(file.relative):
            continue
        # fwalk's descriptors are closed by now: reopen from the base, without following links.
        data = _read(base_fd, file.relative)
        if data is None:
            continue
        if _search(data, file.relative, regex, query.max_matches, matches):
            return GrepResult(matches=matches, truncated=True)
    return GrepResult(matches=matches, truncated=False)


def search_bytes(data: bytes, query: GrepQuery) -> GrepResult:
    """One file's content (a path argument naming a file rather than a directory)."""
    regex = compile_pattern(query)
    matches: list[GrepMatch] = []
    truncated = _search(data, "", regex, query.max_matches, matches)
    return GrepResult(matches=matches, truncated=truncated)


def _search(data: bytes, relative: str, regex: re.Pattern[str], limit: int, matches: list[GrepMatch]) -> bool:
    """Appends the file's matching lines; True when the limit was exceeded."""
    text = _decode(data)
    if text is None:
        return False
    lines = text.split("\n")
    if text.endswith("\n") or not text:
        lines.pop()  # the final line break ends the last line (and an empty file has no line)
    for number, line in enumerate(lines, start=1):
        if regex.search(line) is None:
            continue
        if len(matches) >= limit:
            return True
        matches.append(GrepMatch(path=relative, line_number=number, text=line.removesuffix("\r")))
    return False


def _decode(data: bytes) -> str | None:
    """The file as text the way ripgrep reads it: a UTF-8 BOM dropped, UTF-16 with a BOM transcoded, anything
    else taken as UTF-8 (bad bytes replaced); None for binary content (a NUL)."""
    if data.startswith(codecs.BOM_UTF8):
        text = data[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace")
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = data.decode("utf-16", errors="replace")
    elif b"\0" in data:
        return None
    else:
        text = data.decode("utf-8", errors="replace")
    return None if "\0" in text else text


def _read(base_fd: int, relative: str) -> bytes | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    parts = relative.split("/")
    opened: list[int] = []
    try:
        parent = base_fd
        for name in parts[:-1]:
            parent = os.open(name, flags | os.O_DIRECTORY, dir_fd=parent)
            opened.append(parent)
        fd = os.open(parts[-1], flags, dir_fd=parent)
    except OSError:
        return None  # changed since the listing (a link now, or gone): skipped like an unreadable file
    finally:
        for descriptor in opened:
            os.close(descriptor)
    with os.fdopen(fd, "rb") as file:
        return file.read() if stat.S_ISREG(os.fstat(file.fileno()).st_mode) else None
