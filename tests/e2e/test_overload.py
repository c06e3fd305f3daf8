"""Load shedding against a real `general-agent serve` process: at twice its run capacity (max_concurrent_runs)
the excess turns are refused RESOURCE_EXHAUSTED `RESOURCE_LIMIT` with RetryInfo, quickly (the server's own
access log times every call), without the process growing while it sheds, and the admitted turns finish."""

from __future__ import annotations

import asyncio
import json
import statistics

import grpc

from general_agent.testing import FakeAnthropicThread, HangReply
from tests.support.rpc import Stub, connect, create_session, read_until, rpc_error, turn_call
from tests.support.subprocess_server import ServerProcesses, rss_bytes

CAPACITY = 4
REFUSALS_PER_CALLER = 150  # CAPACITY callers past the bound: 600 refused turns
WARM_UP = 25
MIB = 1024 * 1024
# What 600 refused calls may leave behind (allocator slack, grpc's per-call arenas): a leak of even 2 KiB per
# refused call would pass 1 MiB; the process itself is ~100 MiB.
RSS_GROWTH_BOUND = 4 * MIB


def refusal_times_ms(log: str) -> list[float]:
    """The server-side duration of every StreamTurn refused RESOURCE_EXHAUSTED, from the JSON access log."""
    times = []
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record.get("rpc", "").endswith("/StreamTurn") and record.get("code") == "RESOURCE_EXHAUSTED":
            times.append(float(record["message"].rsplit(" ", 1)[1].removesuffix("ms")))
    return times


async def refused(stub: Stub, session_id: str, count: int) -> None:
    for _ in range(count):
        error = await rpc_error(turn_call(stub, session_id, "one too many"))
        assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_LIMIT")
        assert error.metadata["setting"] == "max_concurrent_runs"
        assert error.retry_delay is not None
        assert error.retry_delay > 0


async def test_twice_the_capacity_is_shed_fast_and_flat(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    hang = HangReply(after_events=2)
    fake_model_thread.fake.default_reply = hang
    server = server_processes.make(extra={"GENERAL_AGENT_MAX_CONCURRENT_RUNS": str(CAPACITY)})
    server.start()
    assert server.process is not None
    async with connect(server.address) as stub:
        admitted_ids = [(await create_session(stub)).identity.session_id for _ in range(CAPACITY)]
        excess_ids = [(await create_session(stub)).identity.session_id for _ in range(CAPACITY)]
        admitted = [turn_call(stub, sid, "a long one") for sid in admitted_ids]
        for call in admitted:
            await read_until(call, "run_started")

        await asyncio.gather(*(refused(stub, sid, WARM_UP) for sid in excess_ids))
        before = rss_bytes(server.process.pid)
        await asyncio.gather(*(refused(stub, sid, REFUSALS_PER_CALLER) for sid in excess_ids))
        grown = rss_bytes(server.process.pid) - before

        hang.release()
        for call in admitted:
            finished = await read_until(call, "run_finished")
            assert finished[-1].run_finished.outcome == 1  # COMPLETED
        # The slots are free again: a turn that was refused a moment ago is admitted now.
        await read_until(turn_call(stub, excess_ids[0], "now"), "run_finished")

    times = refusal_times_ms(server.log())
    assert len(times) == CAPACITY * (WARM_UP + REFUSALS_PER_CALLER), "every refusal is in the access log"
    # A refusal is decided before anything is read or written: a few hundred microseconds of work. The bounds
    # are loose for a shared machine, tight enough to catch a refusal that waits for a slot or a store write.
    assert statistics.median(times) < 5.0, f"median refusal {statistics.median(times):.2f} ms"
    assert max(times) < 250.0, f"slowest refusal {max(times):.1f} ms"
    assert grown < RSS_GROWTH_BOUND, f"RSS grew {grown / MIB:.1f} MiB while shedding"
