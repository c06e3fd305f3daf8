"""Two in-process replicas on one SQLite file (docs/architecture.md, "Replicas and leases"): a session is owned by
a replica only while one of its runs executes there. Idle and suspended sessions are served by either replica
(each revalidates its cached copy against the store's version); a turn on the other replica while a run executes
gets FAILED_PRECONDITION SESSION_BUSY, as on one server; a replica starting beside another's live leases starts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import grpc

from general_agent.testing import FakeAnthropic, HangReply, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import agent_service_pb2_grpc, event_pb2, hosted_tool_pb2, session_pb2
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.app import RunningServer
from general_agent_server.domain.records import RunRecord
from general_agent_server.runs.recovery import repair_abandoned_runs
from general_agent_server.store.port import SessionStore
from general_agent_server.store.sqlite import DB_FILE_NAME, SqliteSessionStore
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of, text_of
from tests.support.rpc import Stub, create_session, get_session, read_until, rpc_error, stream_turn, turn_call

LOOKUP_SCHEMA = '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'


async def two_replicas(server_factory: ServerFactory, state: Path) -> tuple[RunningServer, RunningServer]:
    first = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-a"}, state_dir=state)
    second = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-b"}, state_dir=state)
    return first, second


def stub_of(channel: grpc.aio.Channel) -> Stub:
    return agent_service_pb2_grpc.AgentServiceStub(channel)


async def test_an_idle_session_is_served_by_either_replica(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    # asyncio debug mode, and the suite's check for exceptions nobody retrieved (tests/conftest.py), catch a
    # failure left in an unobserved future.
    asyncio.get_running_loop().set_debug(True)
    first, second = await two_replicas(server_factory, tmp_path / "shared-state")
    async with grpc.aio.insecure_channel(first.address) as ca, grpc.aio.insecure_channel(second.address) as cb:
        a, b = stub_of(ca), stub_of(cb)
        sid = (await create_session(a)).identity.session_id
        fake_model.enqueue(TextReply("from a"), TextReply("from b"), TextReply("from a again"))
        assert last_of(await stream_turn(a, sid, "one"), "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        # B continues the conversation A stored, though A has the session cached.
        events_b = await stream_turn(b, sid, "two")
        assert last_of(events_b, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert [m["role"] for m in fake_model.requests[-1].messages] == ["user", "assistant", "user"]
        # A's cached copy is stale: its admission commit (which would take the lease) meets B's version and writes
        # nothing, without asking the model; A then takes the lease, reads the session again, and its numbering
        # continues after B's events.
        events_a = await stream_turn(a, sid, "three")
        assert text_of(events_a) == "from a again"
        assert len(fake_model.requests) == 3
        assert [m["role"] for m in fake_model.requests[-1].messages] == ["user", "assistant"] * 2 + ["user"]
        assert events_a[0].sequence > events_b[-1].sequence
        on_a, on_b = await get_session(a, sid), await get_session(b, sid)
        assert on_a.last_sequence == on_b.last_sequence == events_a[-1].sequence
        assert on_a.state == on_b.state == session_pb2.SESSION_STATE_IDLE


async def test_a_turn_on_the_other_replica_during_a_run_is_rejected_as_on_one_server(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    first, second = await two_replicas(server_factory, tmp_path / "shared-state")
    async with grpc.aio.insecure_channel(first.address) as ca, grpc.aio.insecure_channel(second.address) as cb:
        a, b = stub_of(ca), stub_of(cb)
        sid = (await create_session(a)).identity.session_id
        # B caches the session while it is idle: its copy is stale once A's run starts, and the REJECT turn
        # below (admitted without a pre-use check) must still learn of A's run under the lease.
        assert (await get_session(b, sid)).state == session_pb2.SESSION_STATE_IDLE
        hang = HangReply(after_events=4, reply=TextReply("slow answer"))
        fake_model.enqueue(hang)
        running = turn_call(a, sid, "long task")
        started = await read_until(running, "assistant_delta")
        run_id = started[0].run_id

        busy = await rpc_error(turn_call(b, sid, "me too"))
        assert (busy.code, busy.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
        assert busy.metadata["active_run_id"] == run_id
        assert busy.metadata["state"] == "RUNNING"
        # Nothing was written by the loser: B sees A's run, still running.
        assert (await get_session(b, sid)).state == session_pb2.SESSION_STATE_RUNNING

        hang.release()
        rest = [r.event async for r in running]
        assert last_of(rest, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        # The run's end released the lease: B's next turn starts at once.
        fake_model.enqueue(TextReply("b's turn"))
        assert last_of(await stream_turn(b, sid, "now"), "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED


async def test_concurrent_turns_through_both_replicas_exactly_one_wins(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    first, second = await two_replicas(server_factory, tmp_path / "shared-state")
    async with grpc.aio.insecure_channel(first.address) as ca, grpc.aio.insecure_channel(second.address) as cb:
        a, b = stub_of(ca), stub_of(cb)
        for _ in range(3):
            sid = (await create_session(a)).identity.session_id
            await get_session(b, sid)
            # The winner's model call hangs until the loser has its answer, so the two turns overlap.
            hang = HangReply(after_events=4, reply=TextReply("winner"))
            fake_model.enqueue(hang)

            async def outcome(stub: Stub, sid: str = sid) -> str:
                try:
                    events = await stream_turn(stub, sid, "race")
                except grpc.aio.AioRpcError as error:
                    return "busy" if error.code() == grpc.StatusCode.FAILED_PRECONDITION else str(error)
                return "won" if last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED else "?"

            tasks = [asyncio.create_task(outcome(a)), asyncio.create_task(outcome(b))]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            hang.release()
            assert sorted(await asyncio.gather(*tasks)) == ["busy", "won"]


async def test_a_suspended_run_continues_on_the_other_replica(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    first, second = await two_replicas(server_factory, tmp_path / "shared-state")
    async with grpc.aio.insecure_channel(first.address) as ca, grpc.aio.insecure_channel(second.address) as cb:
        a, b = stub_of(ca), stub_of(cb)
        lookup = hosted_tool_pb2.HostedToolDefinition(name="lookup", input_schema_json=LOOKUP_SCHEMA)
        sid = (await create_session(a, hosted_tools=[lookup])).identity.session_id
        fake_model.enqueue(
            Reply(blocks=[TextBlock("Looking."), ToolUseBlock(id="toolu_1", name="lookup", input={"q": "x"})]),
            TextReply("Found it."),
        )
        suspended = await stream_turn(a, sid, "look it up")
        assert last_of(suspended, "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
        request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_1", output_json='"x is 1"')
        continued = [r.event async for r in b.SubmitHostedToolResult(request)]
        assert kinds(continued)[0] == "tool_result"
        assert last_of(continued, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert continued[0].run_id == suspended[0].run_id
        assert (await get_session(a, sid)).state == session_pb2.SESSION_STATE_IDLE
        # A resubmission on A (its copy was suspended) replays the first answer instead of failing.
        again = [r.event async for r in a.SubmitHostedToolResult(request)]
        assert [e.sequence for e in again] == [e.sequence for e in continued]


async def test_a_replica_starts_while_another_holds_the_lease_of_a_session_with_pending_calls(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    """The defect of issue 18: start-up loaded every session with waiting calls and failed SESSION_BUSY on one
    whose lease another replica held, then never became ready."""
    state = tmp_path / "shared-state"
    first = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-a"}, state_dir=state)
    async with grpc.aio.insecure_channel(first.address) as ca:
        a = stub_of(ca)
        lookup = hosted_tool_pb2.HostedToolDefinition(name="lookup", input_schema_json=LOOKUP_SCHEMA)
        sid = (await create_session(a, hosted_tools=[lookup])).identity.session_id
        fake_model.enqueue(Reply(blocks=[ToolUseBlock(id="toolu_1", name="lookup", input={"q": "x"})]))
        assert last_of(await stream_turn(a, sid, "go"), "run_finished").outcome == event_pb2.RUN_OUTCOME_SUSPENDED
    # A third replica holds the lease of the suspended session (it is continuing it, say).
    other = SqliteSessionStore(state / DB_FILE_NAME)
    await other.open()
    try:
        assert await other.acquire_lease("default", sid, "replica-c", ttl_seconds=60)
        second = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-b"}, state_dir=state)
        async with grpc.aio.insecure_channel(second.address) as cb:
            b = stub_of(cb)
            assert (await get_session(b, sid)).state == session_pb2.SESSION_STATE_SUSPENDED
            request = turn_api.SubmitHostedToolResultRequest(session_id=sid, call_id="toolu_1", output_json='"1"')
            busy = await rpc_error(b.SubmitHostedToolResult(request))
            assert (busy.code, busy.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "SESSION_BUSY")
            # The call stays pending; once the lease is free the submit works at once.
            await other.release_lease("default", sid, "replica-c")
            fake_model.enqueue(TextReply("done"))
            continued = [r.event async for r in b.SubmitHostedToolResult(request)]
            assert last_of(continued, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
    finally:
        await other.close()


class _StaleSweepStore:
    """The store as another replica's sweep sees it: the unfinished runs it listed earlier, and every lease it
    takes recorded."""

    def __init__(self, store: SqliteSessionStore, listed: list[RunRecord]) -> None:
        self._store = store
        self._listed = listed
        self.taken: list[str] = []

    async def list_unfinished_runs(self) -> list[RunRecord]:
        return self._listed

    async def acquire_lease(self, tenant: str, session_id: str, owner: str, *, ttl_seconds: float) -> bool:
        taken = await self._store.acquire_lease(tenant, session_id, owner, ttl_seconds=ttl_seconds)
        if taken:
            self.taken.append(session_id)
        return taken

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_sweep_working_from_an_older_list_never_takes_the_lease_of_a_run_that_has_ended(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    """The spurious SESSION_BUSY of the scale-out bench: a replica's sweep listed another's run while it
    executed, the run ended, and the sweep took the now free lease to repair it, so the owner's next turn was
    refused ("has an active run") for the moment the sweeper held it."""
    state = tmp_path / "shared-state"
    first = await server_factory({"GENERAL_AGENT_REPLICA_ID": "replica-a"}, state_dir=state)
    store = SqliteSessionStore(state / DB_FILE_NAME)
    await store.open()
    try:
        async with grpc.aio.insecure_channel(first.address) as ca:
            a = stub_of(ca)
            sid = (await create_session(a)).identity.session_id
            hang = HangReply(after_events=4, reply=TextReply("slow answer"))
            fake_model.enqueue(hang)
            running = turn_call(a, sid, "long task")
            await read_until(running, "assistant_delta")
            listed = await store.list_unfinished_runs()
            assert [run.session_id for run in listed] == [sid]
            hang.release()
            assert last_of([r.event async for r in running], "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED

            sweeper = _StaleSweepStore(store, listed)
            repaired = await repair_abandoned_runs(
                cast("SessionStore", sweeper), owner="replica-b", ttl_seconds=30, sequence_block=64
            )
            assert (repaired, sweeper.taken) == (0, [])
            fake_model.enqueue(TextReply("next"))
            assert (
                last_of(await stream_turn(a, sid, "again"), "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
            )
    finally:
        await store.close()
