"""client.run() across a server restart: the `general-agent serve` subprocess is SIGKILLed while a hosted call is
being answered, started again on the same state, and the client (through a loopback proxy, so its address stays)
reattaches after the last sequence it saw, submits the answer and follows the run to its end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from general_agent import AgentClient, Event, HostedToolCall, RunFinished
from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import event_pb2
from tests.support.subprocess_server import ServerProcesses
from tests.support.tcp_proxy import TcpProxy


async def test_a_run_survives_a_server_restart_while_a_hosted_call_is_pending(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    server = server_processes.make()
    await asyncio.to_thread(server.start)
    proxy = TcpProxy(target=server.address)
    await proxy.start()
    called = asyncio.Event()
    go_on = asyncio.Event()
    try:
        async with await AgentClient.connect(proxy.address) as client:

            @client.hosted_tool("ticket")
            async def ticket(title: str) -> str:
                called.set()
                await go_on.wait()  # the server is killed and restarted meanwhile
                return f"opened {title!r}"

            sid = (await client.create_session()).identity.session_id
            start = (await client.get_session(sid)).last_sequence
            fake_model_thread.enqueue(
                Reply(blocks=[ToolUseBlock(id="t1", name="ticket", input={"title": "printer"})]),
                TextReply("Ticket opened."),
            )
            events: list[Event] = []

            async def follow() -> None:
                async for event in client.run(sid, "open a ticket"):
                    events.append(event)

            run = asyncio.create_task(follow())
            await asyncio.wait_for(called.wait(), 30)
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
            proxy.target = server.address  # the restarted server listens on another port
            go_on.set()
            await asyncio.wait_for(run, 60)

            log = [e.sequence async for e in _until_end(client, sid, start)]
    finally:
        await proxy.stop()

    assert [e.sequence for e in events] == log, server.log()
    assert [e.call_id for e in events if isinstance(e, HostedToolCall)] == ["t1"]
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.outcome == "COMPLETED", server.log()
    last = fake_model_thread.requests[-1].body["messages"][-1]["content"]
    assert [block["content"] for block in last if block.get("type") == "tool_result"] == ["opened 'printer'"]


async def _until_end(client: AgentClient, session_id: str, after: int) -> AsyncIterator[event_pb2.SessionEvent]:
    last = (await client.get_session(session_id)).last_sequence
    async for event in client.watch(session_id, after_sequence=after):
        yield event
        if event.sequence >= last:
            return
