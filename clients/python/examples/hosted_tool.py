"""A hosted tool: the model calls `weather`, this process answers it, the run goes on.

    python clients/python/examples/hosted_tool.py [ADDRESS] [QUESTION]

The handler's type hints are the tool's JSON Schema; `create_session` declares the tool and `run` answers
every call of it (also after a dropped connection: it reattaches where it left off).
"""

from __future__ import annotations

import asyncio
import os
import sys

from general_agent import AgentClient, HostedToolCall


async def main(address: str, question: str) -> None:
    async with await AgentClient.connect(address) as client:

        @client.hosted_tool("weather")
        async def weather(city: str, unit: str = "celsius") -> dict[str, object]:
            """The current weather in a city."""
            return {"city": city, "temperature": 21, "unit": unit, "sky": "clear"}

        session = await client.create_session(system_prompt="Answer with the weather tool.")
        run = client.run(session.identity.session_id, question)
        async for event in run:
            if isinstance(event, HostedToolCall):
                print(f"[{event.tool_name}({event.input})]", flush=True)
        assert run.result is not None
        print(run.result.text)


if __name__ == "__main__":
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GENERAL_AGENT_ADDRESS", "127.0.0.1:50051")
    asyncio.run(main(address, sys.argv[2] if len(sys.argv) > 2 else "What's the weather in Paris?"))
