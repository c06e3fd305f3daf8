"""`python -m bench.profile`'s summary of py-spy's collapsed stacks: with native frames, each package's share goes to
the extension module running below the innermost Python frame, or else to that frame's package."""

from __future__ import annotations

from pathlib import Path

from bench.profile import package_of, summarise

_MAIN = "thread (1): MainThread"
_LOOP = "run_forever (asyncio/base_events.py:607);_run_once (asyncio/base_events.py:1922)"
_GRPC = "0x7f00 (grpc/_cython/cygrpc.cpython-311-x86_64-linux-gnu.so)"
_LEDGER = "SessionLedger.commit (general_agent_server/sessions/ledger.py:281)"


def _collapsed(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "server.collapsed"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_sample_goes_to_the_extension_below_its_innermost_python_frame_or_else_to_that_frame(
    tmp_path: Path,
) -> None:
    lines = [
        # gRPC's Cython core under the loop, then our handler it called: our code's sample.
        f"{_MAIN};{_LOOP};task_step (_asynciomodule.c:2704);{_GRPC};{_LEDGER} 5",
        # The loop's callback running inside gRPC's Cython core: gRPC's sample.
        f"{_MAIN};{_LOOP};task_step (_asynciomodule.c:2704);{_GRPC} 3",
        # A socket send from httpx's transport reaching libc: still the Python frame's package.
        f"{_MAIN};{_LOOP};write (h11/_connection.py:500);send (socketmodule.c:3562);0x7f01 (libc.so.6) 2",
        # SQLite's C code under our writer.
        f"{_MAIN};{_LOOP};_transaction (general_agent_server/store/sqlite/writer.py:166);"
        "0x7f02 (_sqlite3.cpython-311-x86_64-linux-gnu.so);0x7f03 (libsqlite3.so.0) 4",
        "thread (1): MainThread;0x7f04 (libc.so.6) 1",
        # Another thread: left out unless --all-threads.
        f"thread (2): sqlite-writer;{_LEDGER} 100",
    ]
    summary = summarise(_collapsed(tmp_path, lines), top=10, all_threads=False)
    shares = summary.split("--- top 10 by package samples\n", 1)[1].splitlines()
    assert shares == [
        "  33.3%  general_agent_server",
        "  26.7%  _sqlite3 (native)",
        "  20.0%  grpc (native)",
        "  13.3%  h11",
        "   6.7%  (no Python frame)",
    ]
    assert summary.startswith("15 samples")


def test_without_native_frames_there_is_no_package_section(tmp_path: Path) -> None:
    summary = summarise(_collapsed(tmp_path, [f"{_MAIN};{_LOOP};{_LEDGER} 2"]), top=5, all_threads=False)
    assert "by package" not in summary
    assert package_of(["_run_once (asyncio/base_events.py:1922)"]) == "asyncio"
    assert package_of(["main (general_agent_server/cli.py:60)", _GRPC]) == "grpc (native)"
    assert package_of(["0x7f04 (libc.so.6)"]) is None
