"""The JSONL export files: a batch is appended whole to `<root>/<tenant>/<session_id>.jsonl`, the file private
(0600) in a private directory (0700) made when missing, even after it was removed; a truncation replaces the
content; every line is redacted on its way to the file."""

from __future__ import annotations

import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from general_agent_server.exports.jsonl_files import JsonlFiles
from general_agent_server.security.redaction import REDACTED, register_secret


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_batches_append_to_private_files_made_when_missing(tmp_path: Path) -> None:
    files = JsonlFiles(tmp_path / "export", name="test export")
    secret = register_secret("sk-jsonl-test-secret-0123456789")
    files.append_lines("acme", "s1", ['{"a":1}', f'{{"key":"{secret}"}}'])
    files.append_lines("acme", "s2", ['{"b":2}'])
    await files.flush()
    first = files.path_for("acme", "s1")
    assert first.read_text() == f'{{"a":1}}\n{{"key":"{REDACTED}"}}\n'
    assert files.path_for("acme", "s2").read_text() == '{"b":2}\n'
    assert (_mode(first), _mode(first.parent)) == (0o600, 0o700)

    files.append_lines("acme", "s1", ['{"c":3}'])
    await files.flush()
    assert first.read_text().splitlines()[-1] == '{"c":3}'
    assert len(first.read_text().splitlines()) == 3

    files.truncate("acme", "s1")
    files.append_lines("acme", "s1", ['{"d":4}'])
    await files.flush()
    assert first.read_text() == '{"d":4}\n'

    shutil.rmtree(tmp_path / "export")  # removed behind the writer's back: made again
    files.append_lines("acme", "s1", ['{"e":5}'])
    files.truncate("acme", "s3")
    await files.flush()
    assert first.read_text() == '{"e":5}\n'
    assert files.path_for("acme", "s3").read_text() == ""
    assert (_mode(first), _mode(first.parent)) == (0o600, 0o700)


async def test_lines_are_read_on_the_writing_thread_not_by_the_appender(tmp_path: Path) -> None:
    files = JsonlFiles(tmp_path / "export", name="test export")
    read_on: list[str] = []

    def lines() -> Iterator[str]:
        read_on.append(threading.current_thread().name)
        yield '{"a":1}'

    files.append_lines("acme", "s1", lines())
    assert read_on == []  # appending encodes nothing: the commit that produced the lines goes on at once
    await files.flush()
    assert files.path_for("acme", "s1").read_text() == '{"a":1}\n'
    assert len(read_on) == 1
    assert read_on[0] != threading.current_thread().name
