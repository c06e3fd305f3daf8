"""The idle-session cache is bounded by the estimated bytes of its sessions as well as by their count:
least recently used idle sessions leave memory when the budget is exceeded; a session in use never does."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

from general_agent.testing import FakeAnthropic, HangReply, TextReply
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from general_agent_server.domain.session import DEFAULT_TENANT
from tests.conftest import ServerFactory
from tests.support.rpc import connect, create_session, stream_turn, text_input

MIB = 1024 * 1024
PROMPT = "p" * MIB
# The prompts here are over the default max_system_prompt_bytes on purpose: they make sizes obvious.
LARGE_PROMPTS = {"GENERAL_AGENT_MAX_SYSTEM_PROMPT_BYTES": str(2 * MIB)}


def loaded(server: RunningServer, session_id: str) -> bool:
    return server.agent.cache.peek(DEFAULT_TENANT, session_id) is not None


async def test_idle_sessions_leave_lru_when_their_bytes_exceed_the_budget(server_factory: ServerFactory) -> None:
    server = await server_factory({"GENERAL_AGENT_MAX_IDLE_SESSION_BYTES": str(int(3.5 * MIB)), **LARGE_PROMPTS})
    registry = server.agent.cache
    async with connect(server.address) as stub:
        held = (await create_session(stub, system_prompt=PROMPT)).identity.session_id
        async with registry.use(DEFAULT_TENANT, held):
            ids = [(await create_session(stub, system_prompt=PROMPT)).identity.session_id for _ in range(6)]
            # Three 1 MiB sessions fit in 3.5 MiB: the three most recently used idle ones stay.
            assert [loaded(server, sid) for sid in ids] == [False, False, False, True, True, True]
            assert loaded(server, held)  # in use: never evicted, and not counted against the idle budget
            assert 3 * MIB < registry.idle_bytes <= 3.5 * MIB
        # Released, the held session is the most recently used idle one: the oldest idle one makes room.
        assert loaded(server, held)
        assert [loaded(server, sid) for sid in ids] == [False, False, False, False, True, True]
        assert registry.idle_bytes <= 3.5 * MIB
        # An evicted session loads again on its next turn, and a history that grows counts too.
        events = await stream_turn(stub, ids[0], "hello")
        assert events[-1].WhichOneof("event") == "run_finished"
        assert loaded(server, ids[0])
        assert registry.idle_bytes <= 3.5 * MIB


async def test_a_running_session_is_never_evicted(server_factory: ServerFactory, fake_model: FakeAnthropic) -> None:
    server = await server_factory({"GENERAL_AGENT_MAX_IDLE_SESSION_BYTES": str(MIB // 2), **LARGE_PROMPTS})
    async with connect(server.address) as stub:
        session_id = (await create_session(stub, system_prompt=PROMPT)).identity.session_id
        assert not loaded(server, session_id)  # idle and over the budget on its own
        hang = HangReply(after_events=4, reply=TextReply("partial rest", chunks=["partial ", "rest"]))
        fake_model.enqueue(hang)
        turn = stub.StreamTurn(turn_api.StreamTurnRequest(session_id=session_id, input=text_input("hello")))
        async for response in turn:
            if response.event.WhichOneof("event") == "assistant_delta":
                break  # the model call is in flight until released
        others = [(await create_session(stub, system_prompt=PROMPT)).identity.session_id for _ in range(3)]
        assert loaded(server, session_id)  # running, whatever the idle cache holds
        assert not any(loaded(server, sid) for sid in others)
        hang.release()
        kinds = [response.event.WhichOneof("event") async for response in turn]
        assert kinds[-1] == "run_finished"
        assert not loaded(server, session_id)  # idle again, and over the budget
        assert server.agent.cache.idle_bytes == 0


async def test_the_count_bound_still_applies(server_factory: ServerFactory) -> None:
    server = await server_factory({"GENERAL_AGENT_MAX_IDLE_SESSIONS": "2"})
    async with connect(server.address) as stub:
        ids = [(await create_session(stub)).identity.session_id for _ in range(4)]
    assert [loaded(server, sid) for sid in ids] == [False, False, True, True]


async def test_an_evicted_session_is_freed_without_the_cycle_collector(server_factory: ServerFactory) -> None:
    """Nothing of an evicted session stays reachable through a reference cycle: its memory goes back at
    once, not whenever the cyclic garbage collector next runs."""
    server = await server_factory({"GENERAL_AGENT_MAX_IDLE_SESSIONS": "1", **LARGE_PROMPTS})
    async with connect(server.address) as stub:
        first = (await create_session(stub, system_prompt=PROMPT)).identity.session_id
        assert (await stream_turn(stub, first, "hello"))[-1].WhichOneof("event") == "run_finished"
        actor = server.agent.cache.peek(DEFAULT_TENANT, first)
        assert actor is not None
        gone = weakref.ref(actor)
        del actor
        gc.collect()
        gc.disable()
        try:
            await create_session(stub)  # evicts the first session
            deadline = time.monotonic() + 10
            while gone() is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # the eviction task ends its session hooks and lease first
            assert gone() is None
        finally:
            gc.enable()
