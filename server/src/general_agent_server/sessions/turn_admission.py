"""What admits a turn into a loaded session: the busy policies, the lease a starting run takes, and the admission
commit (docs/protocol.md, busy policies). Every function here runs with the session's command lock held (the
session, sessions/live.py, takes it); the ENQUEUE wait between attempts happens outside it, in the session."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from general_agent_server.domain.codec import CONTENT_PARTS
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import RunReason, RunTrigger
from general_agent_server.domain.records import RunStatus
from general_agent_server.domain.session import SessionState
from general_agent_server.model.port import Credential
from general_agent_server.runs.admission import prepare_admission
from general_agent_server.runs.driver import RunDriver
from general_agent_server.runs.state import ActiveRun, Admission, BusyPolicy, TurnRequest
from general_agent_server.sessions import steering
from general_agent_server.sessions.loaded import CommandedSession
from general_agent_server.store.port import StoreUnavailableError
from general_agent_server.tenants.slots import RunSlot

logger = logging.getLogger(__name__)


def busy_error(session: CommandedSession) -> ServiceError:
    return ServiceError(
        ErrorCode.FAILED_PRECONDITION,
        "SESSION_BUSY",
        f"session {session.session_id!r} has an active run; retry when it finishes or use another busy_policy",
        metadata={"active_run_id": session.record.active_run_id, "state": session.record.state.value},
    )


async def settle(session: CommandedSession) -> None:
    """A run whose terminal commit has landed is over for hosts (they may have seen its run_finished), but its
    task may still be running its end hooks: wait for it instead of answering SESSION_BUSY."""
    run = session.run
    if run is not None and run.record.status is RunStatus.FINISHED:
        await run.finished.wait()


async def admit(session: CommandedSession, turn: TurnRequest, policy: BusyPolicy) -> Admission:
    """Starts a run, or applies a busy policy other than ENQUEUE. The stop flag is checked after the policy: a
    run started while it is set ends stop_requested."""
    await settle(session)
    session.deps.gate.check()
    if session.deps.run_slots is not None and session.record.state is SessionState.IDLE:
        session.deps.run_slots.check(session.tenant)  # shed before the lease's store write
    if not session.owns_run:
        if policy is BusyPolicy.STEER and (steered := await _steer_elsewhere(session, turn)):
            return Admission(run=None, steered_run_id=steered)
        if _admits_with_lease_in_commit(session):
            try:
                return await _start_leasing(session, _triggered(turn, policy), policy)
            finally:
                session.disown_run()
        await _own_for_turn(session)
    try:
        return await _admit_owned(session, turn, policy)
    finally:
        session.disown_run()


async def _admit_owned(session: CommandedSession, turn: TurnRequest, policy: BusyPolicy) -> Admission:
    """The busy policy applied with the lease held and the state current."""
    if session.record.state is not SessionState.IDLE:
        if policy is BusyPolicy.REJECT:
            raise busy_error(session)
        if policy is BusyPolicy.STEER:
            return Admission(run=None, steered_run_id=await steering.commit_injection(session, turn.parts, None))
        await steering.stop_run(session, RunReason.SUPERSEDED)
    return Admission(run=await start(session, _triggered(turn, policy), fresh=True))


def _triggered(turn: TurnRequest, policy: BusyPolicy) -> TurnRequest:
    return replace(turn, trigger=RunTrigger.STEER if policy is BusyPolicy.STEER else RunTrigger.TURN)


def _admits_with_lease_in_commit(session: CommandedSession) -> bool:
    """Whether the turn starts a run from this copy as it is, so the admission commit itself may take the lease
    (one transaction, not a lease write and then the admission's): an idle copy, not known to be stale, no stop
    flag (a run stopped at its start commits without holding the lease). The commit's compare-and-set on the
    version and on a free lease then decides as the lease write would have."""
    record = session.record
    return (
        record.state is SessionState.IDLE
        and session.run is None
        and not record.stop_requested
        and not session.ledger.stale
    )


async def _start_leasing(session: CommandedSession, turn: TurnRequest, policy: BusyPolicy) -> Admission:
    """Starts a run whose admission commit takes the lease; the run's first model request waits for that commit.
    When another replica changed the session or holds its lease meanwhile, the commit writes nothing (the model
    hooks have been asked by then, the model has not), and the turn proceeds as on a copy known to be stale: the
    lease taken on its own and the session read again under it."""
    await session.deps.ownership.settle(session.tenant, session.session_id)
    try:
        return Admission(run=await start(session, turn, fresh=True, lease_in_commit=True))
    except ServiceError:
        if not session.ledger.stale:
            raise
    await _own_for_turn(session)
    return await _admit_owned(session, turn, policy)


async def _steer_elsewhere(session: CommandedSession, turn: TurnRequest) -> str:
    """A STEER turn for a run another replica executes: its message goes to that run (the id; "" when the
    run ended meanwhile and the turn starts a run here)."""
    body = {"kind": "inject", "parts": CONTENT_PARTS.dumps(turn.parts), "request_id": "", "body_hash": ""}
    answer = await steering.relayed(session, body)
    return str(answer["run_id"]) if answer is not None else ""


async def _own_for_turn(session: CommandedSession) -> None:
    """Takes the lease, then reads the state again (so no other replica starts a run meanwhile). While
    another replica runs the session, its turn is refused as on one server: SESSION_BUSY with the run."""
    try:
        taken = await session.own_run()
    except StoreUnavailableError:
        raise  # the store cannot take the lease's write now (disk full, locked): not another replica's run
    except ServiceError:
        await session.sync.revalidate_locked()
        raise busy_error(session) from None
    await session.sync.revalidate_locked(taken)


async def admit_queued(session: CommandedSession, turn: TurnRequest, *, waited: bool) -> Admission | None:
    """One attempt of an ENQUEUE turn, once the queue let it through: a run when the session is idle, None
    when it must wait again (logged once per turn: `waited` says it was)."""
    await settle(session)
    await session.sync.revalidate_locked()
    if session.record.state is SessionState.IDLE and session.run is None:
        trigger = RunTrigger.ENQUEUED_TURN if waited else RunTrigger.TURN
        return Admission(run=await start(session, replace(turn, trigger=trigger)))
    if not waited:
        log_queued(session)
    return None


def log_queued(session: CommandedSession) -> bool:
    """Says once per queued turn that it waits (for operators; the replica tests wait for this line)."""
    logger.info(
        "turn queued behind run %s",
        session.record.active_run_id,
        extra={"category": "run", "tenant": session.tenant, "session_id": session.session_id},
    )
    return True


async def start(
    session: CommandedSession, turn: TurnRequest, *, fresh: bool = False, lease_in_commit: bool = False
) -> ActiveRun:
    """Admits a run: one commit holds the run row, the transcript entries, the user message and run_started.
    With the stop flag set the run ends at once. `lease_in_commit`: that commit takes the lease (not held yet)."""
    session.deps.gate.check()
    credential = session.require_credential()
    if session.record.state is not SessionState.IDLE or session.run is not None:
        raise busy_error(session)
    slots = session.deps.run_slots
    # Refused before anything is written or asked (the lease, hooks); released when the run's task ends.
    slot = slots.acquire(session.tenant) if slots is not None else None
    try:
        taken = None if lease_in_commit else await session.own_run()
        try:
            return await _start_owned(
                session, turn, credential, fresh=fresh, slot=slot, taken=taken, lease_in_commit=lease_in_commit
            )
        finally:
            session.disown_run()
    except BaseException:
        if slot is not None:
            slot.release()  # a second release is a no-op
        raise


async def _start_owned(
    session: CommandedSession,
    turn: TurnRequest,
    credential: Credential,
    *,
    fresh: bool,
    slot: RunSlot | None,
    taken: int | None,
    lease_in_commit: bool,
) -> ActiveRun:
    revalidated = not fresh and await session.sync.revalidate_locked(taken)
    if revalidated and session.record.state is not SessionState.IDLE:
        raise busy_error(session)  # another replica started a run before this one took the lease
    admission = await prepare_admission(session, turn, credential, session.deps.event_log)
    run = admission.run
    if session.record.stop_requested:
        if slot is not None:
            slot.release()
        await admission.stopped_at_start(session.ledger)
        return run
    session.hold_slot(slot)
    session.run = run
    driver = RunDriver(session, run, first_history=[*session.history, admission.user_message])
    if lease_in_commit:
        # The commit may find the lease held elsewhere: nothing is asked of the model before it has landed.
        try:
            await admission.commit(session.ledger, take_lease=True, publish=False)
        except BaseException:
            session.run = None
            session.release_slot()
            raise
        session.deps.ownership.adopt(session.tenant, session.session_id)
        run.task = asyncio.create_task(driver.execute(), name=f"run-{run.run_id}")
        run.admitted.set()
        # Published after the driver's task is scheduled: the model request goes out first, and the streams send
        # run_started while the model answers.
        session.ledger.publish([admission.started])
        return run
    # The model request goes out while the admission commits (it only reads the history it is given); the
    # driver emits nothing until `admitted` is set.
    run.task = asyncio.create_task(driver.execute(), name=f"run-{run.run_id}")
    try:
        await admission.commit(session.ledger)
    except BaseException:
        run.admission_failed = True
        run.task.cancel()
        session.run = None
        session.release_slot()
        raise
    run.admitted.set()
    return run
