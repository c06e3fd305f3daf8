"""The idle-session cache's byte budget bounds the server's memory: a `general-agent serve` process that
has loaded many sessions with large system prompts grows by at most the budget plus a fixed overhead
(transport buffers, allocator slack), however many sessions it has loaded."""

from __future__ import annotations

import grpc

from general_agent.v1 import agent_service_pb2_grpc
from tests.support.rpc import create_session, stream_turn
from tests.support.subprocess_server import ServerProcesses, rss_bytes

MIB = 1024 * 1024
BUDGET = 16 * MIB
# What the process may grow by besides the cached sessions, measured at ~30 MiB for 1 MiB requests.
FIXED_OVERHEAD = 48 * MIB
SESSIONS = 150  # 150 MiB of system prompts: ten times the budget


async def test_rss_stays_within_the_idle_budget(server_processes: ServerProcesses) -> None:
    server = server_processes.make(
        extra={
            "GENERAL_AGENT_MAX_IDLE_SESSION_BYTES": str(BUDGET),
            "GENERAL_AGENT_MAX_SYSTEM_PROMPT_BYTES": str(2 * MIB),
        },
    )
    server.start()
    assert server.process is not None
    options = [("grpc.max_send_message_length", 64 * MIB)]
    async with grpc.aio.insecure_channel(server.address, options=options) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        warm = (await create_session(stub, system_prompt="warm-up")).identity.session_id
        await stream_turn(stub, warm, "hello")
        baseline = rss_bytes(server.process.pid)
        for index in range(SESSIONS):
            prompt = f"{index} " + "p" * MIB  # distinct, so nothing is shared between sessions
            session_id = (await create_session(stub, system_prompt=prompt)).identity.session_id
            if index % 5 == 0:  # some of them with a turn: history, transcript and events too
                events = await stream_turn(stub, session_id, "hello")
                assert events[-1].WhichOneof("event") == "run_finished"
        grown = rss_bytes(server.process.pid) - baseline
    assert grown <= BUDGET + FIXED_OVERHEAD, (
        f"RSS grew {grown / MIB:.0f} MiB after {SESSIONS} 1 MiB sessions "
        f"(budget {BUDGET // MIB} MiB + {FIXED_OVERHEAD // MIB} MiB)"
    )
