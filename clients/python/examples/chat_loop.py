"""A chat loop: each line read from stdin is one turn; the answer streams to stdout as it arrives.

    python clients/python/examples/chat_loop.py [ADDRESS]

ADDRESS defaults to $GENERAL_AGENT_ADDRESS, else 127.0.0.1:50051 (`make run`). End with Ctrl-D.
"""

from __future__ import annotations

import asyncio
import os
import sys

from general_agent import AgentClient, AssistantDelta, RunFinished


async def main(address: str) -> None:
    async with await AgentClient.connect(address) as client:
        session = await client.create_session(system_prompt="You are a helpful, brief assistant.")
        session_id = session.identity.session_id
        print(f"session {session_id}", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            if not line.strip():
                continue
            async for event in client.run(session_id, line.strip()):
                match event:
                    case AssistantDelta(text):
                        print(text, end="", flush=True)
                    case RunFinished(outcome="COMPLETED"):
                        print(flush=True)
                    case RunFinished(outcome=outcome, error=error):
                        print(f"\n[{outcome}: {error}]", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GENERAL_AGENT_ADDRESS", "127.0.0.1:50051")))
