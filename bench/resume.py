"""Resume of a 10,000-message session: the first turn after a restart against the floor (read the history
rows from the same SQLite file, parse them and send the identical request with the bare SDK), and the
second turn against the bare SDK sending that turn's identical request (the SDK re-serialises every old
message; the service should not have to).

The session is made by one real turn, then its two history rows are repeated in the store file (the server
stopped) up to 10,000 messages. Each round restarts the server (untimed until it is ready).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Final

from bench.common import BenchContext, Result, environment, loadavg, temp_workdir
from bench.harness import (
    PROMPT,
    BaselineClient,
    ServiceClient,
    fake_last,
    request_params,
    row,
    same_request,
    start_bench_service,
    start_fast_fake,
)
from bench.processes import BenchError, process_cpu_seconds
from general_agent_server.store.sqlite import DB_FILE_NAME

MESSAGES: Final = 10_000


def _database(state: Path) -> Path:
    path = state / DB_FILE_NAME
    if not path.exists():
        raise BenchError(f"no store file {path}")
    return path


def _grow(db: Path, session_id: str, total: int) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        rows = conn.execute(
            "SELECT tenant, run_id, format_version, message_json FROM history WHERE session_id=? ORDER BY idx",
            (session_id,),
        ).fetchall()
        if len(rows) != 2:
            raise BenchError(f"expected 2 history rows, found {len(rows)}")
        conn.executemany(
            "INSERT INTO history (tenant, session_id, idx, run_id, format_version, message_json) VALUES (?,?,?,?,?,?)",
            [(rows[i % 2][0], session_id, i, *rows[i % 2][1:]) for i in range(2, total)],
        )
        conn.execute("UPDATE sessions SET history_message_count=? WHERE session_id=?", (total, session_id))


def _floor_request(db: Path, session_id: str, static: dict[str, Any]) -> dict[str, Any]:
    """Read + parse the stored history and build the request (the floor's own work, timed)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT message_json FROM history WHERE session_id=? ORDER BY idx", (session_id,)
        ).fetchall()
    messages = []
    for (raw,) in rows:
        message = json.loads(raw)
        messages.append({"role": message["role"], "content": message["content"]})
    user = {"role": "user", "content": [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}]}
    return {**static, "messages": [*messages, user]}


async def resume(ctx: BenchContext) -> Result:
    rounds = 1 if ctx.quick else 5
    total = 2_000 if ctx.quick else MESSAGES
    first: list[tuple[int, int]] = []  # (service ns, floor ns)
    second: list[tuple[int, int]] = []
    cpu_first: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        workdir = temp_workdir(stack, "bench-resume-")
        state = workdir / "state"
        _, base_url = await start_fast_fake(stack, workdir, ctx.cpus.fake)
        base = BaselineClient(base_url)
        stack.push_async_callback(base.close)
        async with contextlib.AsyncExitStack() as run:
            service, address = await start_bench_service(run, workdir, ctx.cpus.service, base_url, state=state)
            svc = ServiceClient(address)
            run.push_async_callback(svc.close)
            sid = await svc.create()
            await svc.turn(sid)
            static = {k: v for k, v in fake_last(base_url).items() if k not in ("messages", "stream")}
        db = _database(state)
        _grow(db, sid, total)
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            floor_req = _floor_request(db, sid, static)
            floor = await base.call(floor_req)
            floor_ns = time.perf_counter_ns() - t0
            async with contextlib.AsyncExitStack() as run:
                service, address = await start_bench_service(run, workdir, ctx.cpus.service, base_url, state=state)
                svc = ServiceClient(address)
                run.push_async_callback(svc.close)
                await svc.channel.channel_ready()
                cpu0 = process_cpu_seconds(service.pid)
                s1 = await svc.turn(sid)
                cpu_first.append(process_cpu_seconds(service.pid) - cpu0)
                if not same_request(floor_req, fake_last(base_url)):
                    raise BenchError("the floor's request differs from the service's first turn after the restart")
                first.append((s1.total, floor_ns))
                s2 = await svc.turn(sid)
                b2 = await base.call(request_params(fake_last(base_url)))
                second.append((s2.total, b2.total))
                if floor.text != s1.text:
                    raise BenchError("texts differ")
    f_svc = sorted(x[0] for x in first)[len(first) // 2] / 1e6
    f_floor = sorted(x[1] for x in first)[len(first) // 2] / 1e6
    s_svc = sorted(x[0] for x in second)[len(second) // 2] / 1e6
    s_base = sorted(x[1] for x in second)[len(second) // 2] / 1e6
    rows = [
        row(f"resume {total:,}-message session: first turn (vs read+parse+send)", f_svc, f_floor, max_ratio=1.3),
        row(f"{total:,}-message session: second turn (vs bare SDK)", s_svc, s_base),
    ]
    return {
        "benchmark": "resume",
        "title": f"first and second turn on a {total}-message session after a restart",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": environment(ctx.cpus),
        "configuration": {"rounds (restarts)": rounds, "loadavg at end": loadavg()},
        "rows": rows,
        "cpu": {"server CPU of the first turn, ms (median)": round(sorted(cpu_first)[len(cpu_first) // 2] * 1000, 1)},
        "notes": [],
    }
