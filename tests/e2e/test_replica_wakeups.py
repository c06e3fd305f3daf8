"""Two real replicas on one PostgreSQL database whose polling is all but off (`replica_poll_seconds` 30, so an idle
follower polls every 300 s): a watch on B still follows A's run event for event, and a stop sent to B still reaches
A's run, within seconds. Only LISTEN/NOTIFY (store/postgres/listener.py) can deliver them that fast: with the
store's notifications off, both waits below time out."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropicThread
from general_agent.v1 import event_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.e2e.test_replicas import wire
from tests.support.events import last_of
from tests.support.postgres import fresh_database
from tests.support.replicas import Replicas
from tests.support.rpc import connect, create_session
from tests.support.runs import start_hanging_run
from tests.support.subprocess_server import ServerProcesses

# Far shorter than one poll interval (30 s): what arrives within it was delivered by a notification.
DELIVERY_TIMEOUT = 15.0
NO_POLLING = {"GENERAL_AGENT_REPLICA_POLL_SECONDS": "30"}


@pytest.fixture
def replicas(server_processes: ServerProcesses, tmp_path: Path, postgres_url: str) -> Replicas:
    state = tmp_path / "shared-state"
    state.mkdir()
    return Replicas(processes=server_processes, state_dir=state, store_url=fresh_database(postgres_url, "wakeups"))


async def test_a_watch_and_a_stop_on_one_replica_reach_the_run_on_the_other_by_notification(
    replicas: Replicas, fake_model_thread: FakeAnthropicThread
) -> None:
    a, b = replicas.make("replica-a", NO_POLLING), replicas.make("replica-b", NO_POLLING)
    address_a, address_b = a.start(), b.start()
    async with connect(address_a) as stub_a, connect(address_b) as stub_b:
        sid = (await create_session(stub_a)).identity.session_id
        run = await start_hanging_run(stub_a, fake_model_thread, sid, "long task")
        watch = stub_b.WatchSession(turn_api.WatchSessionRequest(session_id=sid, after_sequence=0))
        on_b = [(await anext(aiter(watch))).event]  # attached on B (and replaying) while A's run hangs
        # B's relay reaches A's run only through the store; its answer comes back the same way.
        stopped = await asyncio.wait_for(
            stub_b.RequestStop(turn_api.RequestStopRequest(session_id=sid)), DELIVERY_TIMEOUT
        )
        assert stopped.run_id == run.run_id
        events = [*run.seen, *await run.rest()]
        finished = last_of(events, "run_finished")
        assert (finished.outcome, finished.reason) == (
            event_pb2.RUN_OUTCOME_STOPPED,
            event_pb2.RUN_REASON_STOP_REQUESTED,
        )

        async def rest_of_watch() -> None:
            async for response in watch:
                on_b.append(response.event)
                if response.event.WhichOneof("event") == "run_finished":
                    return

        # The run's end reached B's watch only as A's commits were notified.
        await asyncio.wait_for(rest_of_watch(), DELIVERY_TIMEOUT)
        watch.cancel()
        assert wire(on_b) == wire(events)
