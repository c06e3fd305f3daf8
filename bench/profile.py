"""`python -m bench.profile [--sessions 8] [--seconds 20] [--out DIR]`: sample the server with py-spy while
`--sessions` concurrent sessions run closed-loop text turns (each session's history grows) on the fast fake.

py-spy attaches to the server's pid (`py-spy record --pid`, raw collapsed stacks, `--gil` off so time
waiting in epoll and on the writer thread shows too) and the collapsed stacks are summarised: the top
functions by own samples and by inclusive samples, over the main thread only (`--all-threads` for every
thread). The raw file (`DIR/server.collapsed`) loads into speedscope.app or flamegraph.pl.

`--native` has py-spy record native frames too (C extensions, Cython, libc), and the summary then also gives each
package's share: a sample counts for the package of its innermost Python frame, or for the extension module
(`.so`) running below that frame, e.g. gRPC's Cython core or sqlite3's C code.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from bench.common import VENV_BIN, pin_self, plan_cpus, temp_workdir
from bench.harness import ServiceClient, start_bench_service, start_fast_fake

_FRAME: Final = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")


def _short(frame: str) -> str:
    """`func (path/to/site-packages/pkg/mod.py:12)` → `func (pkg/mod.py)`."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    return f"{match['func']} ({short_path(match['file'])})"


def short_path(path: str) -> str:
    """A source path from its package on: `.../site-packages/pkg/mod.py` → `pkg/mod.py` (also for the server's
    `src/` tree and the standard library)."""
    for marker in ("site-packages/", "/src/", "python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _file_of(frame: str) -> str:
    """The file part of a frame (`func (path/to/file.py:12)` → `path/to/file.py`), empty when it has none."""
    match = _FRAME.match(frame)
    return match["file"] if match is not None else ""


def package_of(frames: list[str]) -> str | None:
    """The package a sample's time goes to (frames outermost first, paths shortened): the extension module running
    below the innermost Python frame (`grpc (native)`, `_sqlite3 (native)`), or else that Python frame's package
    (`general_agent_server`, `asyncio`, `h11`). None for a sample without a Python frame."""
    files = [_file_of(frame) for frame in frames]
    python = [i for i, file in enumerate(files) if file.endswith(".py")]
    if not python:
        return None
    innermost = python[-1]
    for file in files[innermost + 1 :]:
        library = file.rsplit("/", 1)[-1]
        if ".cpython-" in library or (library.endswith(".so") and not library.startswith(("libc.", "libpython"))):
            return file.split("/", 1)[0].split(".", 1)[0] + " (native)"
    return files[innermost].split("/", 1)[0].removesuffix(".py")


def summarise(collapsed: Path, *, top: int, all_threads: bool) -> str:
    """Own and inclusive samples per function over the collapsed stacks, as percentages of the total, and each
    package's share (package_of) when the stacks have native frames."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    native = False
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = [_short(f) for f in stack.split(";")]
        if not all_threads and frames and "MainThread" not in frames[0] and "process " not in frames[0]:
            continue
        count = int(count_text)
        total += count
        own[frames[-1]] += count
        for frame in set(frames[1:]):
            inclusive[frame] += count
        native = native or ".so" in stack  # a shared library's frame: py-spy ran with --native
        packages[package_of(frames[1:]) or "(no Python frame)"] += count
    lines = [f"{total} samples"]
    counters = [("own", own), ("inclusive", inclusive)] + ([("package", packages)] if native else [])
    for title, counter in counters:
        lines.append(f"--- top {top} by {title} samples")
        for frame, count in counter.most_common(top):
            lines.append(f"{100 * count / max(total, 1):6.1f}%  {frame}")
    return "\n".join(lines)


async def _load(address: str, sessions: int, seconds: float) -> int:
    svc = ServiceClient(address)
    ids = [await svc.create() for _ in range(sessions)]
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(session_id: str) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await svc.turn(session_id)
            done += 1

    await asyncio.gather(*(worker(i) for i in ids))
    await svc.close()
    return done


async def profile(sessions: int, seconds: float, out: Path, rate: int, *, idle: bool, native: bool = False) -> Path:
    cpus = plan_cpus()
    pin_self(cpus.client)
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-profile-")
        fake, base_url = await start_fast_fake(stack, workdir, cpus.fake)
        service, address = await start_bench_service(stack, workdir, cpus.service, base_url)
        await _load(address, sessions, 2.0)  # warm-up: imports, first connections, caches
        collapsed = out / "server.collapsed"
        argv = [str(VENV_BIN / "py-spy"), "record", "--pid", str(service.pid), "--format", "raw"]
        argv += [
            "--rate",
            str(rate),
            "--duration",
            str(int(seconds)),
            "--threads",
            *(["--idle"] if idle else []),
            *(["--native"] if native else []),
            "-o",
            str(collapsed),
        ]
        spy = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        await asyncio.sleep(1.0)  # py-spy attached
        turns = await _load(address, sessions, seconds - 1.5)
        _, err = await spy.communicate()
        if spy.returncode != 0:
            raise SystemExit(f"py-spy failed: {err.decode(errors='replace')}")
        print(f"{turns} turns from {sessions} sessions in {seconds - 1.5:.1f}s; fake pid {fake.pid}")
        return collapsed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--all-threads", action="store_true")
    parser.add_argument("--busy-only", action="store_true", help="leave out idle samples (threads waiting)")
    parser.add_argument("--native", action="store_true", help="record native frames too; adds shares by package")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "bench-profile")
    parser.add_argument("--summarise", type=Path, help="only summarise an existing collapsed file")
    args = parser.parse_args()
    if args.summarise is None:
        args.out.mkdir(parents=True, exist_ok=True)
        collapsed = asyncio.run(
            profile(args.sessions, args.seconds, args.out, args.rate, idle=not args.busy_only, native=args.native)
        )
    else:
        collapsed = args.summarise
    summary = summarise(collapsed, top=args.top, all_threads=args.all_threads)
    (collapsed.parent / "summary.txt").write_text(summary + "\n")
    sys.stdout.write(summary + "\n")


if __name__ == "__main__":
    main()
