"""What answers the calls a suspended run waits on: a host's hosted-tool result, a person's approval, and the
deadline that times either out. The answers apply under the session's command lock (the session,
sessions/live.py, takes it) and under the session's lease; `wait_until_exposed` waits outside the lock first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from general_agent_server.domain.content import TextPart
from general_agent_server.domain.errors import ServiceError
from general_agent_server.domain.records import ApprovalDecision, CallKind, CallResult, CallStatus, ResolvedBy
from general_agent_server.runs.approvals import ApprovalAnswer, timeout_answer
from general_agent_server.runs.hosted import resolve_approval, resolve_hosted
from general_agent_server.runs.state import Resolution, payload_hash
from general_agent_server.sessions.loaded import CommandedSession
from general_agent_server.sessions.relay import POLL_SECONDS

logger = logging.getLogger(__name__)


async def wait_until_exposed(session: CommandedSession, call_id: str, *, locked: bool = False) -> None:
    """Waits until a call the running run still holds is exposed by its suspension, here or on the replica
    executing it (a host may know the call id from tool_call while the round's local tools still run)."""
    while session.runs_elsewhere:
        await asyncio.sleep(POLL_SECONDS)
        # Reads the suspension (or the run's end) once it is committed.
        await (session.sync.revalidate_locked() if locked else session.sync.revalidate())
    while (run := session.run) is not None and run.task is not None and not run.task.done():
        if not any(r.call_id == call_id for r in run.pending()):
            return
        await asyncio.wait([run.task])


async def submit(session: CommandedSession, call_id: str, result: CallResult) -> Resolution:
    """Lock held: a host's result for a pending hosted call. The credential is resolved before the last result
    is committed, so a missing one leaves the call pending."""
    await wait_until_exposed(session, call_id, locked=True)
    async with _resolving(session):
        run = session.run
        last = run is not None and [r.call_id for r in run.waiting()] == [call_id]
        credential = session.require_credential() if last else None
        payload = payload_hash(result)
        resolution = await resolve_hosted(
            session, run, call_id, result, ResolvedBy.SUBMIT, payload=payload, credential=credential
        )
        return session.resumed(resolution)


async def approve(session: CommandedSession, call_id: str, answer: ApprovalAnswer) -> Resolution:
    """Lock held: a person's answer to a call waiting for approval. The credential is resolved before the
    answer that lets the run continue is committed, so a missing one leaves the call waiting."""
    await wait_until_exposed(session, call_id, locked=True)
    async with _resolving(session):
        run = session.run
        call = next((r for r in run.round if r.call_id == call_id), None) if run is not None else None
        stays = answer.decision is not ApprovalDecision.DENY and call is not None and call.kind is CallKind.HOSTED
        last = run is not None and [r.call_id for r in run.waiting()] == [call_id] and not stays
        credential = session.require_credential() if last else None
        return session.resumed(await resolve_approval(session, run, call_id, answer, credential=credential))


@contextlib.asynccontextmanager
async def _resolving(session: CommandedSession) -> AsyncIterator[None]:
    """Resolving what a suspended run waits on (lock held): under the session's lease, taken before the state
    is read again, so two replicas never resolve or continue the same run at once (SESSION_BUSY while
    another replica holds it). Released afterwards unless the run continues here."""
    taken = await session.own_run()
    try:
        await session.sync.revalidate_locked(taken)
        yield
    finally:
        session.disown_run()


async def expire(session: CommandedSession, call_id: str) -> None:
    """Lock held: a call's deadline passed (another replica's sweeper may have resolved it first)."""
    try:
        async with _resolving(session):
            await _expire_owned(session, call_id)
    except ServiceError:
        logger.exception("could not time out tool call %s", call_id, extra={"category": "tool_result"})


async def _expire_owned(session: CommandedSession, call_id: str) -> None:
    run = session.run
    call = next((r for r in run.pending() if r.call_id == call_id), None) if run is not None else None
    if call is None:
        return
    if call.status is CallStatus.AWAITING_APPROVAL:
        session.resumed(await resolve_approval(session, run, call_id, timeout_answer(call), credential=None))
        return
    result = CallResult(content=(TextPart(text="hosted tool timed out"),), is_error=True)
    resolution = await resolve_hosted(session, run, call_id, result, ResolvedBy.TIMEOUT, payload="", credential=None)
    session.resumed(resolution)
