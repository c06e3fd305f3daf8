"""The session-level commands a loaded session applies: reset, a change of its record (overrides, identity)
and compaction. Each runs with the session's command lock held (the session, sessions/live.py, takes it) and
answers a repeated request from its idempotency key."""

from __future__ import annotations

from collections.abc import Callable

from general_agent_server.domain.events import CompactionReason, RunReason, SessionResetEvent
from general_agent_server.domain.session import SessionRecord, SessionState
from general_agent_server.domain.transcript import SessionResetEntry
from general_agent_server.hooks.payloads import MessageHistory
from general_agent_server.runs.compaction import CompactionOutcome, Compactor, outcome_from_json, outcome_to_json
from general_agent_server.sessions import steering, turn_admission
from general_agent_server.sessions.idempotency import KeyedRequest
from general_agent_server.sessions.loaded import CommandedSession


async def reset(session: CommandedSession, reason: str, keyed: KeyedRequest) -> SessionRecord:
    """Stops any run (SESSION_RESET), fires before_reset, then clears history, pending calls, usage snapshot
    and stop flag; numbering, config and checkpoints stay."""
    if await keyed.replay() is not None:
        return session.record
    await steering.stop_run(session, RunReason.SESSION_RESET)
    await session.tools.close_mcp()  # they start again at the next run
    await session.hooks.fire_and_wait(
        "before_reset",
        {
            "sessionFile": session.session_file,
            "messages": MessageHistory(tuple(m.api_message() for m in session.history)),
            "reason": reason,
        },
    )
    ledger = session.ledger
    event = ledger.stamp("", SessionResetEvent(reason=reason))
    await ledger.commit(
        events=[event],
        transcript=[ledger.entry("", SessionResetEntry(reason=reason), event.sequence)],
        history=[],
        replace_history=True,
        pending_call_ids=(),
        pending_injections=(),
        usage_snapshot=None,
        last_compaction_time=None,
        approved_tools=(),
        stop_requested=False,
        state=SessionState.IDLE,
        active_run_id="",
        idempotency=keyed.record({"session_id": session.session_id}),
    )
    return session.record


async def change(
    session: CommandedSession,
    derive: Callable[[SessionRecord], dict[str, object]],
    keyed: KeyedRequest,
    answer: dict[str, object],
) -> SessionRecord:
    """Applies a change of the session record decided from its current state; an empty change stores only the
    request's key."""
    if await keyed.replay() is not None:
        return session.record
    changes = derive(session.record)
    if changes:
        await session.ledger.commit(idempotency=keyed.record(dict(answer)), derive=lambda _: changes)
    else:
        await keyed.remember(session.session_id, dict(answer))
    return session.record


async def compact(
    session: CommandedSession,
    reason: CompactionReason,
    keyed: KeyedRequest,
    *,
    instructions: str,
    due: Callable[[SessionRecord], bool] | None,
) -> CompactionOutcome:
    """Compacts an idle session's history; `due` decides from the session's state whether it is time (a no-op
    result otherwise). The summary is written under the command lock, so a turn arriving meanwhile waits."""
    if (replay := await keyed.replay()) is not None:
        return outcome_from_json(replay)
    await turn_admission.settle(session)
    if session.run is not None or session.record.state is not SessionState.IDLE:
        raise turn_admission.busy_error(session)
    if due is not None and not due(session.record):
        count = len(session.history)
        outcome = CompactionOutcome(reason=reason, compacted=False, messages_before=count, messages_after=count)
    else:
        model_ref = session.record.config.model_ref or session.settings.default_model
        compactor = Compactor(session, run_id="", model_ref=model_ref, credential=session.require_credential())
        outcome = await compactor.compact(reason, instructions)
    await keyed.remember(session.session_id, outcome_to_json(outcome))
    return outcome
