"""`python -m bench.thread_cpu --syscalls` reads `strace -f` output: calls are counted by thread, a resumed call
("<... name resumed>") is not counted twice, and the report lists the busiest thread first, per turn."""

from __future__ import annotations

from pathlib import Path

from bench.thread_cpu import count_syscalls, report_syscalls

TRACE = """\
101   epoll_wait(3, [], 8, 0) = 0
101   getpid()                = 7
101   futex(0x7f, FUTEX_WAIT_BITSET_PRIVATE, 0, NULL <unfinished ...>
102   pwrite64(7, "\\0\\0\\0\\1", 24, 4096) = 24
102   pwrite64(7, "SQLite format 3", 4096, 4120) = 4096
101   <... futex resumed>) = 0
102   fcntl(8, F_SETLK, {l_type=F_UNLCK, l_whence=SEEK_SET, l_start=120, l_len=1}) = 0
101   getpid()                = 7
101   +++ exited with 0 +++
"""


def test_calls_are_counted_by_thread_and_reported_per_turn(tmp_path: Path) -> None:
    trace = tmp_path / "strace.txt"
    trace.write_text(TRACE)
    calls = count_syscalls(trace)
    assert calls == {
        101: {"epoll_wait": 1, "getpid": 2, "futex": 1},
        102: {"pwrite64": 2, "fcntl": 1},
    }
    report = report_syscalls({"MainThread": calls[101], "sqlite-writer": calls[102]}, turns=2).splitlines()
    main, writer = report
    assert main.split()[:2] == ["MainThread", "2.0/turn:"]
    assert "getpid 1.0" in main
    assert writer.split()[:2] == ["sqlite-writer", "1.5/turn:"]
    assert "pwrite64 1.0" in writer
