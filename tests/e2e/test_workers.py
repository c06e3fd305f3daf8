"""`general-agent serve --workers 2` (docs/deployment.md, "Worker processes"): two processes serve one port and
one SQLite store, each a replica of its own; a SIGKILLed worker is restarted by the supervisor, and sessions go
on through the same address."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from general_agent.testing import FakeAnthropicThread, TextReply
from general_agent.v1 import event_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import last_of, text_of
from tests.support.rpc import connect, create_session, stream_turn
from tests.support.runs import start_hanging_run
from tests.support.subprocess_server import ServerProcesses


def workers_ready(state_dir: Path) -> dict[str, Any]:
    """The ready files of the workers: worker name -> {address, pid}. The supervisor removes a dead worker's file
    before restarting it, and a worker writes its file through a temporary one, so a file listed may be gone by
    the time it is read; such a file is not (yet) a ready worker."""
    ready: dict[str, Any] = {}
    for path in state_dir.glob("ready-*.json.worker-*"):
        if path.suffix == ".tmp":
            continue
        try:
            ready[path.name.rsplit(".", 1)[1]] = json.loads(path.read_text())
        except FileNotFoundError:
            continue
    return ready


async def wait_for(condition: Any, what: str, timeout: float = 30.0) -> None:
    """Polls a condition (bounded); never a timing assertion."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_two_workers_share_one_port_and_a_dead_one_is_restarted(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    server = server_processes.make(extra_args=["--workers", "2"])
    address = server.start()
    ready = workers_ready(server.state_dir)
    assert sorted(ready) == ["worker-1", "worker-2"]
    # Both bound the supervisor's port: without SO_REUSEPORT the second would have failed to start.
    assert {r["address"] for r in ready.values()} == {address}
    assert len({r["pid"] for r in ready.values()}) == 2
    assert server.process is not None
    assert server.process.pid not in {r["pid"] for r in ready.values()}

    # A session turned and then stopped through different connections, whichever worker each reaches.
    async with connect(address) as first, connect(address) as second:
        sid = (await create_session(first)).identity.session_id
        fake_model_thread.enqueue(TextReply("hello"))
        assert text_of(await stream_turn(second, sid, "hi")) == "hello"
        run = await start_hanging_run(first, fake_model_thread, sid, "long task")
        await second.RequestStop(turn_api.RequestStopRequest(session_id=sid))
        assert last_of(await run.rest(), "run_finished").outcome == event_pb2.RUN_OUTCOME_STOPPED
        await second.ClearStop(turn_api.ClearStopRequest(session_id=sid))

    killed = ready["worker-1"]["pid"]
    os.kill(killed, signal.SIGKILL)
    await wait_for(
        lambda: workers_ready(server.state_dir).get("worker-1", {}).get("pid") not in (None, killed),
        "the supervisor never restarted the killed worker",
    )
    async with connect(address) as stub:
        fake_model_thread.enqueue(TextReply("still here"))
        assert text_of(await stream_turn(stub, sid, "again")) == "still here"
    assert server.terminate() == 0
