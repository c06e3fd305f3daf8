"""ForkSession: a new session with the source's history and transcript up to the last *completed* run at or
before `at_sequence` (docs/protocol.md, forks). A running or suspended tail is never copied, so no tool_use is
cut from its result. Copied: prompt, model, thinking, hosted definitions, tool policy, MCP config, memory
scope, labels, the session's own hook registrations, auth profile, and the usage snapshot of a fork of the
latest state. Not copied: pending calls, queued turns, the stop flag, events (the fork's log starts at 1),
checkpoints, cumulative usage, the in-memory key, and the workspace unless `copy_workspace`."""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from general_agent_server.domain.context import CallContext, SessionView
from general_agent_server.domain.errors import invalid_argument, quoted
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.records import RunStatus
from general_agent_server.domain.session import ForkOrigin, SessionIdentity, SessionOverrides, SessionRecord
from general_agent_server.domain.transcript import CompactionEntry, SessionResetEntry, TranscriptEntry
from general_agent_server.domain.validation import check_sequence, check_session_id, check_session_key, check_token
from general_agent_server.exports.transcript_export import TranscriptExporter
from general_agent_server.hooks.admin import HookAdmin
from general_agent_server.hooks.registrations import HOOK_REGISTRATION
from general_agent_server.model.credentials import SessionKeys
from general_agent_server.sessions.cache import SessionCache
from general_agent_server.sessions.idempotency import Idempotency, IdempotencyKeys
from general_agent_server.sessions.live import LiveSession
from general_agent_server.sessions.service import SessionService
from general_agent_server.sessions.serving import ServingGate
from general_agent_server.store.port import SessionStore, WriteBatch

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Cut:
    """What of the source a fork copies, read while no command applies to the source."""

    source: SessionRecord
    history: list[HistoryMessage]
    transcript: list[TranscriptEntry]
    cut: int
    workspace: Path


@dataclass(frozen=True, kw_only=True)
class ForkDeps:
    sessions: SessionService
    store: SessionStore
    cache: SessionCache
    keys: SessionKeys
    idempotency: IdempotencyKeys
    hooks: HookAdmin
    exporter: TranscriptExporter
    gate: ServingGate


class Forks:
    def __init__(self, deps: ForkDeps) -> None:
        self._deps = deps

    async def fork_session(
        self,
        ctx: CallContext,
        source_session_id: str,
        *,
        identity: SessionIdentity,
        overrides: SessionOverrides,
        at_sequence: int | None,
        copy_workspace: bool,
        inherit_mode: bool = True,
        idem: Idempotency | None = None,
    ) -> SessionView:
        deps, sessions = self._deps, self._deps.sessions
        check_session_id(source_session_id, "source_session_id")
        if identity.session_id:
            check_session_id(identity.session_id, "identity.session_id")
        check_session_key(identity.session_key, "identity.session_key", sessions.settings.input_limits)
        check_sequence(at_sequence, "at_sequence")
        check_token("overrides.api_key", overrides.api_key)
        deps.gate.check()
        replay = await deps.idempotency.replay(ctx.tenant, "ForkSession", idem)
        if replay is not None:
            return await sessions.get_session(ctx, str(replay["session_id"]))
        async with deps.cache.use(ctx.tenant, source_session_id) as source:
            cut = await source.quiesced(lambda: self._cut(source, at_sequence))
        config = overrides.apply(cut.source.config)
        sessions.check_config(config, "overrides")
        session_id = identity.session_id or str(uuid.uuid4())
        src = cut.source
        record = sessions.new_record(
            ctx.tenant,
            SessionIdentity(
                mode=src.identity.mode if inherit_mode else identity.mode,
                session_id=session_id,
                session_key=identity.session_key or src.identity.session_key,
            ),
            config,
            forked_from=ForkOrigin(session_id=source_session_id, at_sequence=cut.cut),
            # The source's context usage describes its latest state: only a fork of that state inherits it.
            usage_snapshot=src.usage_snapshot if at_sequence is None and cut.history else None,
            history_message_count=len(cut.history),
            approved_tools=src.approved_tools if overrides.approval_policy is None else (),
        )
        registrations = await deps.hooks.copied_to(ctx.tenant, source_session_id, session_id)
        batch = WriteBatch(
            tenant=ctx.tenant,
            session_id=session_id,
            history=cut.history,
            transcript=cut.transcript,
            idempotency=deps.idempotency.record(ctx.tenant, "ForkSession", idem, {"session_id": session_id}),
            hook_registrations=[(s.plugin_id, HOOK_REGISTRATION.dumps(s)) for _, s in registrations],
        )
        await sessions.insert(record, batch)
        for live, _ in registrations:
            deps.hooks.activate(live)
        fork = deps.cache.new_session(record, cut.history)
        await deps.cache.adopt(fork)
        deps.exporter.append(ctx.tenant, session_id, cut.transcript)
        deps.keys.set(ctx.tenant, session_id, overrides.api_key)
        if copy_workspace and cut.workspace.exists() and cut.workspace != fork.workspace:
            await asyncio.to_thread(shutil.copytree, cut.workspace, fork.workspace, symlinks=True, dirs_exist_ok=True)
        logger.info("session forked", extra={"category": "system", "tenant": ctx.tenant, "session_id": session_id})
        return sessions.view(record)

    async def _cut(self, source: LiveSession, at_sequence: int | None) -> _Cut:
        store = self._deps.store
        src = source.record
        cutoff = src.last_sequence if at_sequence is None else at_sequence
        runs = await store.list_runs(src.tenant, src.session_id)
        finished = [r for r in runs if r.status is RunStatus.FINISHED and r.last_sequence <= cutoff]
        kept_runs = {r.run_id for r in finished}
        cut = finished[-1].last_sequence if finished else 0
        await store.flush()
        entries = await store.read_transcript(src.tenant, src.session_id, after_entry_id=0, limit=1 << 30)
        for kind, what in ((SessionResetEntry, "reset"), (CompactionEntry, "compaction")):
            marks = [e.sequence for e in entries if isinstance(e.body, kind)]
            if any(m > cutoff for m in marks) and any(r.last_sequence < max(marks) for r in finished):
                # A later reset cleared (a compaction summarised) the history of the runs before it: that state
                # cannot be rebuilt.
                raise invalid_argument(
                    "at_sequence",
                    f"{cutoff} is before the last {what} of session {quoted(src.session_id)} (sequence "
                    f"{max(marks)}), which replaced that history; fork at or after the {what}",
                )
        # The fork's log starts at 1: copied entries keep their content, not the source's numbers. Session-level
        # entries (a reset) up to the fork point come along, so the copy reads like the source.
        transcript = [
            replace(e, sequence=0, entry_id=0)
            for e in entries
            if (e.run_id in kept_runs and e.sequence <= cut) or (not e.run_id and e.sequence <= cutoff)
        ]
        return _Cut(
            source=src,
            history=[m for m in source.history if m.run_id in kept_runs],
            transcript=transcript,
            cut=cut,
            workspace=source.workspace,
        )
