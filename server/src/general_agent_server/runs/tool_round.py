"""One tool round of a run: the tool calls of one model call (docs/protocol.md, event order).

For each call in call order: before_tool_call runs, tool_call is emitted with the final input, and an unknown
tool, schema-invalid input or a block is a tool_error right after it. The assistant message, every call and
those errors commit in one step. Local calls then run concurrently and their results are committed in call
order; hosted calls suspend the run. When every result is in, one user message carries them in call order.

That results message commits while the next model request goes out (`complete(overlap=True)`): the request is
built from the history with the message, and the model call emits nothing until the commit has landed
(`land`), so event order and durability are as if it had been awaited in place."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from general_agent_server.domain.clock import utcnow
from general_agent_server.domain.content import TextPart
from general_agent_server.domain.events import (
    HostedToolCall,
    RunFinished,
    RunOutcome,
    RunReason,
    SequencedEvent,
    StopReason,
    ToolCall,
    TurnComplete,
)
from general_agent_server.domain.records import (
    Approval,
    CallKind,
    CallResult,
    CallStatus,
    ResolvedBy,
    RunStatus,
    ToolCallRecord,
)
from general_agent_server.domain.session import SessionState
from general_agent_server.domain.transcript import ToolCallEntry, TranscriptEntry
from general_agent_server.runs.approvals import approval_for, requested_event
from general_agent_server.runs.host import RunHost
from general_agent_server.runs.limits import RunLimits, limit_reached
from general_agent_server.runs.results import resolved, result_entry, result_event, results_message
from general_agent_server.runs.run_hooks import ask_hook
from general_agent_server.runs.state import ActiveRun, CallModel, DriverState, NextStep, RunToolRound, Suspend
from general_agent_server.tools.runtime import ToolKind, ToolSet, ToolSpec

_Planned = tuple[ToolCallRecord, list[SequencedEvent], list[TranscriptEntry]]


class ToolRound:
    """The tool rounds of one driver: it changes `run.round` only while the driver's task runs."""

    def __init__(self, host: RunHost, run: ActiveRun, state: DriverState, limits: RunLimits) -> None:
        self._host = host
        self._run = run
        self._state = state
        self._limits = limits

    async def run(self, step: RunToolRound, tools: ToolSet) -> NextStep:
        run, ledger = self._run, self._host.ledger
        max_tools = self._limits.tool_calls
        over_limit = run.record.tool_calls + len(step.tool_uses) > max_tools
        events, transcript = list(step.events), list(step.transcript)
        records: list[ToolCallRecord] = []
        for position, block in enumerate(step.tool_uses):
            record, call_events, call_transcript = await self._plan(position, block, tools, over_limit)
            records.append(record)
            events.extend(call_events)
            transcript.extend(call_transcript)
        run.record = replace(
            run.record, tool_calls=run.record.tool_calls + len(step.tool_uses), usage=self._state.usage
        )
        run.round = records
        await ledger.commit(
            events=events,
            transcript=transcript,
            history=[step.assistant],
            tool_calls=records,
            runs=[run.record],
            transcript_filtered=True,
            **step.changes,
        )
        if over_limit:
            await self.complete()
            return limit_reached(RunReason.MAX_TOOL_CALLS, "max_tool_calls_per_run", max_tools, StopReason.TOOL_USE)
        await self._run_local(tools)
        waiting = run.waiting()
        if waiting:
            return Suspend(hosted=tuple(waiting))
        await self.complete(overlap=True)
        return CallModel()

    async def resume(self, tools: ToolSet) -> None:
        """A continuation: the calls approved while the run was suspended run now, then the round completes."""
        await self._run_local(tools)
        await self.complete()

    async def _plan(self, position: int, block: dict[str, Any], tools: ToolSet, over_limit: bool) -> _Planned:
        """One call of the round: its final input, its tool_call event, and a tool_error when it cannot run."""
        host, run = self._host, self._run
        ledger, hooks = host.ledger, host.hooks
        call_id, name = str(block["id"]), str(block["name"])
        arguments = block.get("input")
        spec = tools.lookup(name)
        error: str | None
        requested: dict[str, Any] | None = None
        if over_limit:
            error = f"not executed: the run reached max_tool_calls_per_run ({self._limits.tool_calls})"
        elif spec is None:
            error = f"Tool {name} not found"
        else:
            error = tools.validation_error(name, arguments)
            if error is None and isinstance(arguments, dict):
                arguments, error, requested = await self._before_tool_call(name, call_id, arguments, tools)
        # tool_call carries the final input (after before_tool_call rewrites).
        input_json = json.dumps(arguments if arguments is not None else {}, separators=(",", ":"))
        call = ledger.stamp(run.run_id, ToolCall(call_id=call_id, tool_name=name, input_json=input_json))
        entry = ledger.entry(
            run.run_id, ToolCallEntry(call_id=call_id, tool_name=name, input_json=input_json), call.sequence
        )
        transcript = await hooks.filter_transcript([entry])
        hosted = spec is not None and spec.kind is ToolKind.HOSTED
        record = ToolCallRecord(
            tenant=host.tenant,
            session_id=host.session_id,
            run_id=run.run_id,
            round_index=self._state.usage.model_calls,
            position=position,
            call_id=call_id,
            tool_name=name,
            input_json=input_json,
            kind=CallKind.HOSTED if hosted else CallKind.LOCAL,
        )
        if error is not None:
            result = CallResult(content=(TextPart(text=error),), is_error=True)
            hooks.after_tool_call(run.run_id, name, call_id, input_json, result)
            failed = ledger.stamp(run.run_id, result_event(record, result))
            transcript.extend(
                await hooks.filter_transcript([ledger.entry(run.run_id, result_entry(record, result), failed.sequence)])
            )
            return resolved(record, result, ResolvedBy.EXECUTED, failed.sequence), [call, failed], transcript
        assert spec is not None  # an unknown tool is an error above
        approval = self._approval(spec, requested)
        if isinstance(approval, str):  # needs approval, but nobody can be asked
            return await self._refused(record, approval, call, transcript)
        if approval is not None:
            return replace(record, status=CallStatus.AWAITING_APPROVAL, approval=approval), [call], transcript
        if hosted:
            record = replace(record, deadline=utcnow() + host.hosted_deadline(spec))
        return record, [call], transcript

    def _approval(self, spec: ToolSpec, requested: dict[str, Any] | None) -> Approval | str | None:
        host = self._host
        settings = host.settings
        approval = approval_for(
            host.ledger.record,
            spec,
            requested,
            default_policy=settings.tenants.approval_policy(host.tenant, settings.approval_policy),
            default_timeout=settings.approval_timeout,
            max_timeout=settings.hosted_call_timeout_max,
            now=utcnow(),
        )
        if approval is not None and host.ledger.record.parent_session_id:
            return f"Tool {spec.name} needs a person's approval, which a subagent cannot ask for"
        return approval

    async def _refused(
        self, record: ToolCallRecord, error: str, call: SequencedEvent, transcript: list[TranscriptEntry]
    ) -> _Planned:
        ledger, hooks, run = self._host.ledger, self._host.hooks, self._run
        result = CallResult(content=(TextPart(text=error),), is_error=True)
        hooks.after_tool_call(run.run_id, record.tool_name, record.call_id, record.input_json, result)
        failed = ledger.stamp(run.run_id, result_event(record, result))
        entry = ledger.entry(run.run_id, result_entry(record, result), failed.sequence)
        transcript.extend(await hooks.filter_transcript([entry]))
        return resolved(record, result, ResolvedBy.EXECUTED, failed.sequence), [call, failed], transcript

    async def _before_tool_call(
        self, name: str, call_id: str, arguments: dict[str, Any], tools: ToolSet
    ) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
        """A block becomes the call's error; rewritten params are shallow-merged over the original arguments
        and validated again; a requireApproval comes back as the third value."""
        run = self._run
        result = await ask_hook(
            self._host.hooks,
            run,
            "before_tool_call",
            {"toolName": name, "params": arguments, "runId": run.run_id, "toolCallId": call_id},
            budget=self._limits.remaining_seconds(run.record.started_at),
            stop_reason=self._state.last_stop_reason,
            toolName=name,
            toolCallId=call_id,
        )
        if not result:
            return arguments, None, None
        if result.get("block") is True:
            return arguments, str(result.get("blockReason") or "Tool call blocked by plugin hook"), None
        requested = result.get("requireApproval")
        requested = requested if isinstance(requested, dict) else None
        params = result.get("params")
        if isinstance(params, dict):
            arguments = {**arguments, **params}
            return arguments, tools.validation_error(name, arguments), requested
        return arguments, None, requested

    async def _run_local(self, tools: ToolSet) -> None:
        host, run, state = self._host, self._run, self._state
        local = [r for r in run.round if r.status is CallStatus.PENDING and r.kind is CallKind.LOCAL]
        if not local:
            return
        for record in local:
            execution = tools.execute(
                record.tool_name, json.loads(record.input_json), host.tool_context(run.run_id, record.call_id)
            )
            state.tasks[record.call_id] = asyncio.create_task(
                host.hooks.traced(record.tool_name, execution), name=f"tool-{record.tool_name}-{record.call_id}"
            )
        started = time.monotonic()
        waiting = bool(run.waiting())
        for index, record in enumerate(local):
            outcome = await state.tasks[record.call_id]
            del state.tasks[record.call_id]
            result = CallResult(content=outcome.content, details_json=outcome.details_json, is_error=outcome.is_error)
            elapsed_ms = int((time.monotonic() - started) * 1000)
            host.hooks.after_tool_call(
                run.run_id, record.tool_name, record.call_id, record.input_json, result, elapsed_ms, spanned=True
            )
            # The round's last result rides with the round's results message (one commit fewer per round).
            await self._resolve_local(record, result, carry=index == len(local) - 1 and not waiting)

    async def _resolve_local(self, record: ToolCallRecord, result: CallResult, *, carry: bool) -> None:
        ledger, run = self._host.ledger, self._run
        event = ledger.stamp(run.run_id, result_event(record, result))
        done = resolved(record, result, ResolvedBy.EXECUTED, event.sequence)
        run.replace_call(done)
        entry = ledger.entry(run.run_id, result_entry(record, result), event.sequence)
        if carry:
            self._state.carry = ([event], [entry], [done])
            return
        await ledger.commit(events=[event], transcript=[entry], tool_calls=[done])

    async def suspend(self, hosted: tuple[ToolCallRecord, ...]) -> None:
        """Commits SUSPENDED, then exposes every hosted call and every approval request at once, in call order."""
        host, run, state = self._host, self._run, self._state
        ledger = host.ledger
        events = [
            ledger.stamp(
                run.run_id,
                requested_event(r)
                if r.status is CallStatus.AWAITING_APPROVAL
                else HostedToolCall(
                    call_id=r.call_id, tool_name=r.tool_name, input_json=r.input_json, deadline=r.deadline
                ),
            )
            for r in hosted
        ]
        pending = tuple(r.call_id for r in hosted)
        finished = RunFinished(
            outcome=RunOutcome.SUSPENDED, stop_reason=StopReason.TOOL_USE, pending_call_ids=pending, usage=state.usage
        )
        events.append(ledger.stamp(run.run_id, finished))
        run.record = replace(run.record, status=RunStatus.SUSPENDED, usage=state.usage)
        await ledger.commit(events=events, runs=[run.record], state=SessionState.SUSPENDED, pending_call_ids=pending)
        host.deadlines.arm(list(hosted))
        state.suspended = True

    async def complete(self, *, turn_complete: bool = True, overlap: bool = False) -> None:
        """All results are in: one user message with them in call order, then turn_complete{tool_use}."""
        ledger, run, state = self._host.ledger, self._run, self._state
        if not run.round:
            return
        message = results_message(run.round, run.run_id)
        events, transcript, done = state.take_carry()
        if turn_complete:
            events.append(ledger.stamp(run.run_id, TurnComplete(stop_reason=StopReason.TOOL_USE)))
        commit = ledger.commit(events=events, transcript=transcript, tool_calls=done, history=[message])
        if overlap:
            state.next_history = [*ledger.history, message]
            state.landing = asyncio.ensure_future(commit)
            state.landing_round, run.round = run.round, []
            return
        await commit
        run.round = []

    async def land(self) -> None:
        """Waits for the overlapped results commit, if any. Its failure surfaces here, with the round put back
        so the failure path closes it as if the commit had been awaited in place."""
        state = self._state
        landing, state.landing = state.landing, None
        if landing is None:
            return
        try:
            await landing
        except Exception:
            self._run.round, state.landing_round = state.landing_round, []
            raise
        state.landing_round = []

    async def close(self, message: str, by: ResolvedBy) -> None:
        """Stops whatever of the round is unfinished: running tools are cancelled, pending calls get an is_error
        result, and the round's results message keeps the history valid (no tool_use without its result)."""
        host, run, state = self._host, self._run, self._state
        ledger = host.ledger
        for task in state.tasks.values():
            task.cancel()
        if state.tasks:
            await asyncio.gather(*state.tasks.values(), return_exceptions=True)
        state.tasks.clear()
        if not run.round:
            return
        events, transcript, done = state.take_carry()
        result = CallResult(content=(TextPart(text=message),), is_error=True)
        for record in run.pending():
            event = ledger.stamp(run.run_id, result_event(record, result))
            events.append(event)
            transcript.append(ledger.entry(run.run_id, result_entry(record, result), event.sequence))
            done.append(resolved(record, result, by, event.sequence))
        for record in done:
            run.replace_call(record)
        events.append(ledger.stamp(run.run_id, TurnComplete(stop_reason=StopReason.TOOL_USE)))
        history = [results_message(run.round, run.run_id)]
        await ledger.commit(events=events, transcript=transcript, tool_calls=done, history=history, pending_call_ids=())
        run.round = []
        host.deadlines.disarm()
