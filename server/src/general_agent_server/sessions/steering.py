"""What steers and stops a loaded session's run: injected messages, the sticky stop flag, cancelling an
executing run and closing a suspended one. Every coroutine here runs with the session's command lock held (the
session, sessions/live.py, takes it); `cancel_run` needs no lock. While another replica executes the run, these
commands go to it (`relayed`)."""

from __future__ import annotations

from general_agent_server.domain.codec import CONTENT_PARTS
from general_agent_server.domain.content import ContentPart
from general_agent_server.domain.events import RunReason
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.domain.transcript import MessageEntry
from general_agent_server.runs.driver import RunDriver
from general_agent_server.sessions.idempotency import KeyedRequest
from general_agent_server.sessions.ledger import CommitRefused
from general_agent_server.sessions.loaded import CommandedSession
from general_agent_server.sessions.relay import Body


async def relayed(session: CommandedSession, body: Body) -> Body | None:
    """The answer of the replica executing the session's run, when another one does (sessions/relay.py); None
    when the command applies here."""
    relay = session.deps.relay
    while relay is not None and session.runs_elsewhere:
        answer = await relay.send(session.tenant, session.session_id, body)
        if answer is not None:
            return answer
        await session.sync.revalidate_locked()  # the run ended, or its dead owner's run is repaired
    return None


async def inject(session: CommandedSession, parts: tuple[ContentPart, ...], keyed: KeyedRequest | None) -> str:
    """Commits a steering message to the active run's queue, here or on the replica executing the run; "" when
    the session is idle."""
    if keyed is not None and (replay := await keyed.replay()) is not None:
        return str(replay["run_id"])
    idem = keyed.idem if keyed is not None else None
    body = {"kind": "inject", "parts": CONTENT_PARTS.dumps(parts)}
    body |= {"request_id": idem.request_id if idem else "", "body_hash": idem.body_hash if idem else ""}
    if (answer := await relayed(session, body)) is not None:
        return str(answer["run_id"])
    run_id = await commit_injection(session, parts, keyed)
    if not run_id and keyed is not None:
        await keyed.remember(session.session_id, {"run_id": ""})
    return run_id


async def commit_injection(
    session: CommandedSession, parts: tuple[ContentPart, ...], keyed: KeyedRequest | None
) -> str:
    run = session.run
    if run is None or session.record.state is SessionState.IDLE:
        return ""

    def enqueue(record: SessionRecord) -> dict[str, object]:
        # Decided in commit order: a run that has committed its end takes no more messages.
        if record.state is SessionState.IDLE or record.active_run_id != run.run_id:
            raise CommitRefused
        return {"pending_injections": (*record.pending_injections, parts)}

    try:
        await session.ledger.commit(
            transcript=[session.ledger.entry(run.run_id, MessageEntry(content=parts, injected=True))],
            derive=enqueue,
            idempotency=keyed.record({"run_id": run.run_id}) if keyed is not None else None,
        )
    except CommitRefused:
        return ""
    return run.run_id


async def request_stop(session: CommandedSession) -> str:
    """Sets the sticky stop flag and stops the active run (executing or suspended)."""
    if (answer := await relayed(session, {"kind": "stop"})) is not None:
        return str(answer["run_id"])
    await set_stop_flag(session, True)
    return await stop_run(session, RunReason.STOP_REQUESTED)


async def clear_stop(session: CommandedSession) -> bool:
    if (answer := await relayed(session, {"kind": "clear_stop"})) is not None:
        return bool(answer["was_set"])
    return await set_stop_flag(session, False)


async def stop(session: CommandedSession, reason: RunReason, run_id: str) -> str:
    """Stops the active run (or the one named), here or on the replica executing it."""
    if (answer := await relayed(session, {"kind": "cancel", "reason": reason.value, "run_id": run_id})) is not None:
        return str(answer["run_id"])
    return await stop_run(session, reason, run_id)


async def set_stop_flag(session: CommandedSession, value: bool) -> bool:
    previous = session.record.stop_requested
    if previous != value:
        await session.ledger.commit(stop_requested=value)
    return previous


def cancel_run(session: CommandedSession, reason: RunReason, run_id: str = "") -> str:
    """Stops an executing run once (not sticky); returns its id, or "" when nothing matched. Safe to call
    from a handler that is itself being cancelled: it only flags and cancels the run task. A suspended run
    has no task: `stop_run` ends it."""
    run = session.run
    if run is None or (run_id and run.run_id != run_id) or run.task is None or run.task.done():
        return ""
    if run.stop_reason is None:
        run.stop_reason = reason
        run.task.cancel()
    return run.run_id


async def stop_run(session: CommandedSession, reason: RunReason, run_id: str = "") -> str:
    """Stops the run here and waits for its terminal run_finished (a suspended one is closed)."""
    run = session.run
    if run is None or (run_id and run.run_id != run_id):
        return ""
    if run.task is not None and not run.task.done():
        cancel_run(session, reason)
        await run.finished.wait()
        return run.run_id
    if session.record.state is SessionState.SUSPENDED:
        run.stop_reason = reason
        session.deadlines.disarm()
        await RunDriver(session, run).close_suspended(reason)
    return run.run_id
