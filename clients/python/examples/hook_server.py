"""A hook server: this process serves `before_tool_call` and blocks every `exec` the model asks for.

    python clients/python/examples/hook_server.py [ADDRESS]

It registers its hooks with the server (which dials back to this process), serves until SIGINT or SIGTERM, then
unregisters: a fail-closed hook left registered would block every tool call once this host is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from general_agent import AgentClient, HookServer
from general_agent.v1 import hook_pb2

hooks = HookServer(plugin_id="no-shell")


@hooks.before_tool_call(priority=10, timeout=2.0)
async def no_shell(
    event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext
) -> hook_pb2.BeforeToolCallResult | None:
    if event.tool_name == "exec":
        return hook_pb2.BeforeToolCallResult(block=True, block_reason="no shell here")
    return None  # no opinion: the call proceeds


async def main(address: str) -> None:
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    async with hooks, await AgentClient.connect(address) as client:
        await hooks.register(client)
        print("serving hooks on", hooks.address, flush=True)
        await stop.wait()
        await hooks.unregister(client)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GENERAL_AGENT_ADDRESS", "127.0.0.1:50051")))
