"""Pure protobuf ↔ domain conversions. Nothing here does I/O or holds state."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from general_agent.v1 import (
    checkpoint_pb2,
    content_pb2,
    event_pb2,
    hook_registration_pb2,
    hosted_tool_pb2,
    session_pb2,
    transcript_pb2,
)
from general_agent.v1 import run_session_pb2 as run_session_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from general_agent_server.api.decoding import InvalidRequest
from general_agent_server.api.errors import status_from_detail, status_from_error
from general_agent_server.domain import events as ev
from general_agent_server.domain import transcript as tr
from general_agent_server.domain.content import ContentPart, ImagePart, TextPart
from general_agent_server.domain.context import SessionView
from general_agent_server.domain.errors import ServiceError, invalid_argument
from general_agent_server.domain.json_values import parse_json
from general_agent_server.domain.records import CallResult
from general_agent_server.domain.session import (
    AutoCompaction,
    HostedToolDefinition,
    MemoryConfig,
    SessionConfig,
    SessionIdentity,
    SessionLimits,
    SessionMode,
    SessionOverrides,
    SessionState,
    ThinkingConfig,
    ThinkingMode,
    Usage,
    UsageSnapshot,
)
from general_agent_server.domain.validation import check_token
from general_agent_server.hooks.payloads import IncludeMessages
from general_agent_server.hooks.registrations import HookBindingSpec, HookRegistrationSpec, HookTlsSpec
from general_agent_server.hooks.runner import FailurePolicy
from general_agent_server.runs.commands import (
    Attach,
    CancelCommand,
    ClearStopCommand,
    Command,
    EventOut,
    HeartbeatOut,
    HostedResultCommand,
    InjectCommand,
    Output,
    PingCommand,
    RejectedCommand,
    StopCommand,
    TurnCommand,
)
from general_agent_server.runs.state import BusyPolicy, OnDisconnect, TurnOptions
from general_agent_server.sessions.idempotency import Idempotency
from general_agent_server.store.port import SessionQuery
from general_agent_server.workspace.checkpoints.recorder import CheckpointInfo

# ---------------------------------------------------------------------- scalars


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    micros = int(value.timestamp() * 1_000_000)
    ts.seconds, ts.nanos = divmod(micros, 1_000_000)
    ts.nanos *= 1000
    return ts


def _seconds(value: duration_pb2.Duration, present: bool) -> float | None:
    return value.seconds + value.nanos / 1e9 if present else None


def _duration(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def body_hash(request: Message) -> str:
    """Digest of a request without its request_id, for idempotent replays."""
    copy = type(request)()
    copy.CopyFrom(request)
    if "request_id" in copy.DESCRIPTOR.fields_by_name:
        copy.ClearField("request_id")
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()


def idempotency(request: Message, field: str = "request_id") -> Idempotency | None:
    request_id = getattr(request, "request_id", "")
    if not request_id:
        return None
    check_token(field, request_id)
    return Idempotency(request_id=request_id, body_hash=body_hash(request))


def _json_text(value: Message) -> dict[str, Any]:
    result: dict[str, Any] = json_format.MessageToDict(value, preserving_proto_field_name=True)
    return result


def _struct_from_json(text: str) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    if text:
        loaded = json.loads(text)
        if isinstance(loaded, dict):
            s.update(loaded)
    return s


def _value_from_json(text: str) -> struct_pb2.Value | None:
    if not text:
        return None
    v = struct_pb2.Value()
    json_format.Parse(text, v)
    return v


# ---------------------------------------------------------------------- sessions

_MODES = {
    session_pb2.SESSION_MODE_UNSPECIFIED: SessionMode.GENERAL,
    session_pb2.SESSION_MODE_GENERAL: SessionMode.GENERAL,
    session_pb2.SESSION_MODE_CODING: SessionMode.CODING,
}
_MODES_OUT = {
    SessionMode.GENERAL: session_pb2.SESSION_MODE_GENERAL,
    SessionMode.CODING: session_pb2.SESSION_MODE_CODING,
}
_STATES_OUT = {
    SessionState.IDLE: session_pb2.SESSION_STATE_IDLE,
    SessionState.RUNNING: session_pb2.SESSION_STATE_RUNNING,
    SessionState.SUSPENDED: session_pb2.SESSION_STATE_SUSPENDED,
}
_THINKING = {
    session_pb2.THINKING_MODE_UNSPECIFIED: ThinkingMode.DEFAULT,
    session_pb2.THINKING_MODE_OFF: ThinkingMode.OFF,
    session_pb2.THINKING_MODE_ADAPTIVE: ThinkingMode.ADAPTIVE,
    session_pb2.THINKING_MODE_BUDGET: ThinkingMode.BUDGET,
}
_THINKING_OUT = {v: k for k, v in _THINKING.items()}


def mode_from_proto(value: int, field: str) -> SessionMode:
    mode = _MODES.get(session_pb2.SessionMode.ValueType(value))
    if mode is None:
        raise invalid_argument(field, f"unknown mode {value}")
    return mode


def identity_from_proto(identity: session_pb2.SessionIdentity, field: str) -> SessionIdentity:
    return SessionIdentity(
        mode=mode_from_proto(identity.mode, f"{field}.mode"),
        session_id=identity.session_id,
        session_key=identity.session_key,
    )


def thinking_from_proto(thinking: session_pb2.ThinkingConfig, field: str) -> ThinkingConfig:
    if thinking.mode not in _THINKING:
        raise invalid_argument(f"{field}.mode", f"unknown thinking mode {thinking.mode}")
    return ThinkingConfig(mode=_THINKING[thinking.mode], budget_tokens=thinking.budget_tokens)


def config_from_proto(session: session_pb2.Session) -> SessionConfig:
    limits = session.limits
    return SessionConfig(
        system_prompt=session.system_prompt,
        model_ref=session.model_ref,
        thinking=thinking_from_proto(session.thinking, "session.thinking"),
        max_tokens=session.max_tokens,
        auth_profile_id=session.auth_profile_id,
        allowed_tools=tuple(session.allowed_tools),
        memory=MemoryConfig(
            enabled=session.memory.enabled if session.memory.HasField("enabled") else None,
            user_id=session.memory.user_id,
            agent_id=session.memory.agent_id,
        ),
        labels=dict(session.labels),
        limits=SessionLimits(
            max_model_calls_per_run=limits.max_model_calls_per_run,
            max_tool_calls_per_run=limits.max_tool_calls_per_run,
            run_deadline_seconds=_seconds(limits.run_deadline, limits.HasField("run_deadline")),
            hosted_call_timeout_seconds=_seconds(limits.hosted_call_timeout, limits.HasField("hosted_call_timeout")),
        ),
        auto_compaction=AutoCompaction(
            threshold_pct=session.auto_compaction.threshold_pct,
            cooldown_seconds=_seconds(session.auto_compaction.cooldown, session.auto_compaction.HasField("cooldown")),
        ),
        hosted_tools=tuple(
            hosted_tool_from_proto(t, f"session.hosted_tools[{i}]") for i, t in enumerate(session.hosted_tools)
        ),
        mcp_servers={name: _json_text(cfg) for name, cfg in session.mcp_servers.items()},
        disabled_mcp_servers=tuple(session.disabled_mcp_servers),
    )


def session_registrations(session: session_pb2.Session) -> list[HookRegistrationSpec]:
    """Hook registrations made in CreateSession; they are stored as registrations of the session, not in
    its config."""
    return [
        registration_from_proto(r, field=f"session.hook_registrations[{i}]")
        for i, r in enumerate(session.hook_registrations)
    ]


def hosted_tool_from_proto(tool: hosted_tool_pb2.HostedToolDefinition, field: str) -> HostedToolDefinition:
    """`input_schema_json` wins over the Struct (Struct numbers are doubles)."""
    schema: Any
    if tool.input_schema_json:
        schema = parse_json(f"{field}.input_schema_json", tool.input_schema_json)
    elif tool.HasField("input_schema"):
        schema = json_format.MessageToDict(tool.input_schema)
    else:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise invalid_argument(f"{field}.input_schema", "must be a JSON object")
    return HostedToolDefinition(
        name=tool.name,
        description=tool.description,
        input_schema=schema,
        timeout_seconds=_seconds(tool.timeout, tool.HasField("timeout")),
    )


def hosted_tool_to_proto(tool: HostedToolDefinition) -> hosted_tool_pb2.HostedToolDefinition:
    out = hosted_tool_pb2.HostedToolDefinition(
        name=tool.name, description=tool.description, input_schema_json=json.dumps(dict(tool.input_schema))
    )
    out.input_schema.update(dict(tool.input_schema))
    if (d := _duration(tool.timeout_seconds)) is not None:
        out.timeout.CopyFrom(d)
    return out


def overrides_from_proto(overrides: session_pb2.SessionOverrides) -> SessionOverrides:
    return SessionOverrides(
        system_prompt=overrides.system_prompt if overrides.HasField("system_prompt") else None,
        model_ref=overrides.model_ref if overrides.HasField("model_ref") else None,
        thinking=thinking_from_proto(overrides.thinking, "overrides.thinking")
        if overrides.HasField("thinking")
        else None,
        auth_profile_id=overrides.auth_profile_id if overrides.HasField("auth_profile_id") else None,
        max_tokens=overrides.max_tokens if overrides.HasField("max_tokens") else None,
        api_key=overrides.api_key,
    )


def usage_to_proto(usage: Usage) -> session_pb2.Usage:
    return session_pb2.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        model_calls=usage.model_calls,
    )


def snapshot_to_proto(snapshot: UsageSnapshot) -> session_pb2.UsageSnapshot:
    return session_pb2.UsageSnapshot(
        used_input_tokens=snapshot.used_input_tokens,
        context_window=snapshot.context_window,
        used_pct=snapshot.used_pct,
        capture_time=timestamp(snapshot.capture_time),
    )


def session_to_proto(view: SessionView) -> session_pb2.Session:
    r = view.record
    c = r.config
    session = session_pb2.Session(
        identity=session_pb2.SessionIdentity(
            mode=_MODES_OUT[r.identity.mode], session_id=r.session_id, session_key=r.identity.session_key
        ),
        tenant=r.tenant,
        system_prompt=c.system_prompt,
        model_ref=c.model_ref,
        thinking=session_pb2.ThinkingConfig(
            mode=_THINKING_OUT[c.thinking.mode], budget_tokens=c.thinking.budget_tokens
        ),
        max_tokens=c.max_tokens,
        auth_profile_id=c.auth_profile_id,
        allowed_tools=list(c.allowed_tools),
        hosted_tools=[hosted_tool_to_proto(t) for t in c.hosted_tools],
        labels=dict(c.labels),
        parent_session_id=r.parent_session_id,
        state=_STATES_OUT[r.state],
        active_run_id=r.active_run_id,
        pending_call_ids=list(r.pending_call_ids),
        stop_requested=r.stop_requested,
        cumulative_usage=usage_to_proto(r.cumulative_usage),
        transcript_path=view.transcript_path,
        last_sequence=r.last_sequence,
        create_time=timestamp(r.create_time),
        update_time=timestamp(r.update_time),
        etag=r.etag,
        history_message_count=r.history_message_count,
    )
    session.memory.user_id = c.memory.user_id
    session.memory.agent_id = c.memory.agent_id
    if c.memory.enabled is not None:
        session.memory.enabled = c.memory.enabled
    limits = session.limits
    limits.max_model_calls_per_run = c.limits.max_model_calls_per_run
    limits.max_tool_calls_per_run = c.limits.max_tool_calls_per_run
    if (d := _duration(c.limits.run_deadline_seconds)) is not None:
        limits.run_deadline.CopyFrom(d)
    if (d := _duration(c.limits.hosted_call_timeout_seconds)) is not None:
        limits.hosted_call_timeout.CopyFrom(d)
    session.auto_compaction.threshold_pct = c.auto_compaction.threshold_pct
    if (d := _duration(c.auto_compaction.cooldown_seconds)) is not None:
        session.auto_compaction.cooldown.CopyFrom(d)
    if r.usage_snapshot is not None:
        session.usage_snapshot.CopyFrom(snapshot_to_proto(r.usage_snapshot))
    if r.forked_from is not None:
        session.forked_from.session_id = r.forked_from.session_id
        session.forked_from.at_sequence = r.forked_from.at_sequence
    return session


def query_from_proto(request: session_api.ListSessionsRequest) -> SessionQuery:
    return SessionQuery(
        session_key_prefix=request.session_key_prefix,
        mode=None if request.mode == session_pb2.SESSION_MODE_UNSPECIFIED else mode_from_proto(request.mode, "mode"),
        labels=dict(request.labels),
        parent_session_id=request.parent_session_id,
        include_children=request.include_children,
    )


# ---------------------------------------------------------------------- turns

_BUSY = {
    turn_api.BUSY_POLICY_UNSPECIFIED: BusyPolicy.REJECT,
    turn_api.BUSY_POLICY_REJECT: BusyPolicy.REJECT,
    turn_api.BUSY_POLICY_ENQUEUE: BusyPolicy.ENQUEUE,
    turn_api.BUSY_POLICY_INTERRUPT: BusyPolicy.INTERRUPT,
    turn_api.BUSY_POLICY_STEER: BusyPolicy.STEER,
}


def on_disconnect_from_proto(value: int) -> OnDisconnect:
    return OnDisconnect.CONTINUE if value == turn_api.ON_DISCONNECT_CONTINUE else OnDisconnect.CANCEL


def turn_options_from_proto(options: turn_api.TurnOptions, field: str = "options") -> TurnOptions:
    policy = _BUSY.get(turn_api.BusyPolicy.ValueType(options.busy_policy))
    if policy is None:
        raise invalid_argument(f"{field}.busy_policy", f"unknown busy policy {options.busy_policy}")
    return TurnOptions(busy_policy=policy, on_disconnect=on_disconnect_from_proto(options.on_disconnect))


def hosted_result_from_proto(
    request: turn_api.SubmitHostedToolResultRequest | run_session_api.RunSessionHostedResult, prefix: str = ""
) -> CallResult:
    """Spec 6: a string output becomes the tool text, anything else its JSON (output_json preferred);
    details default to the output; an error submit is is_error for the model. Values arrive checked
    (api/decoding.py): finite numbers, bounded depth."""
    which = request.WhichOneof("result")
    details = json_format.MessageToJson(request.details, indent=None) if request.HasField("details") else ""
    if which == "error":
        return CallResult(
            content=(TextPart(text=request.error or "hosted tool failed"),), details_json=details, is_error=True
        )
    if which == "output_json":
        value = parse_json(f"{prefix}output_json", request.output_json)
        text = value if isinstance(value, str) else request.output_json
        return CallResult(content=(TextPart(text=text),), details_json=details or request.output_json)
    if which == "output":
        value_json = json_format.MessageToJson(request.output, indent=None)
        value = json.loads(value_json)
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return CallResult(content=(TextPart(text=text),), details_json=details or value_json)
    raise invalid_argument(f"{prefix}result", "set one of output, output_json or error")


# ---------------------------------------------------------------------- checkpoints


def checkpoint_to_proto(info: CheckpointInfo) -> checkpoint_pb2.Checkpoint:
    return checkpoint_pb2.Checkpoint(
        checkpoint_id=info.checkpoint_id,
        run_id=info.run_id,
        tool_call_id=info.call_id,
        tool_name=info.tool_name,
        paths=list(info.paths),
        stored_bytes=info.stored_bytes,
        create_time=timestamp(info.created_at),
    )


# ---------------------------------------------------------------------- hooks

_FAILURE_POLICIES = {
    hook_registration_pb2.HOOK_FAILURE_POLICY_UNSPECIFIED: FailurePolicy.DEFAULT,
    hook_registration_pb2.HOOK_FAILURE_POLICY_FAIL_OPEN: FailurePolicy.FAIL_OPEN,
    hook_registration_pb2.HOOK_FAILURE_POLICY_FAIL_CLOSED: FailurePolicy.FAIL_CLOSED,
}
_FAILURE_POLICIES_OUT = {v: k for k, v in _FAILURE_POLICIES.items()}
_INCLUDE_MESSAGES = {
    hook_registration_pb2.HOOK_INCLUDE_MESSAGES_UNSPECIFIED: IncludeMessages.NONE,
    hook_registration_pb2.HOOK_INCLUDE_MESSAGES_NONE: IncludeMessages.NONE,
    hook_registration_pb2.HOOK_INCLUDE_MESSAGES_LAST_N: IncludeMessages.LAST_N,
    hook_registration_pb2.HOOK_INCLUDE_MESSAGES_ALL: IncludeMessages.ALL,
}
_INCLUDE_MESSAGES_OUT = {
    IncludeMessages.NONE: hook_registration_pb2.HOOK_INCLUDE_MESSAGES_NONE,
    IncludeMessages.LAST_N: hook_registration_pb2.HOOK_INCLUDE_MESSAGES_LAST_N,
    IncludeMessages.ALL: hook_registration_pb2.HOOK_INCLUDE_MESSAGES_ALL,
}


def hook_name(value: int) -> str:
    """HOOK_NAME_BEFORE_TOOL_CALL → "before_tool_call" (the wire name)."""
    return (
        hook_registration_pb2.HookName.Name(hook_registration_pb2.HookName.ValueType(value))
        .removeprefix("HOOK_NAME_")
        .lower()
    )


def registration_from_proto(
    registration: hook_registration_pb2.HookRegistration, session_id: str = "", field: str = "registration"
) -> HookRegistrationSpec:
    bindings = []
    for index, binding in enumerate(registration.hooks):
        if binding.name == hook_registration_pb2.HOOK_NAME_UNSPECIFIED:
            raise invalid_argument(f"{field}.hooks[{index}].name", "is required", reason="INVALID_HOOK")
        bindings.append(
            HookBindingSpec(
                name=hook_name(binding.name),
                priority=binding.priority,
                timeout_seconds=_seconds(binding.timeout, binding.HasField("timeout")),
                failure_policy=_FAILURE_POLICIES.get(
                    hook_registration_pb2.HookFailurePolicy.ValueType(binding.failure_policy), FailurePolicy.DEFAULT
                ),
                include_messages=_INCLUDE_MESSAGES.get(
                    hook_registration_pb2.HookIncludeMessages.ValueType(binding.include_messages), IncludeMessages.NONE
                ),
                last_n=binding.last_n,
            )
        )
    tls = None
    if registration.target.HasField("tls"):
        given = registration.target.tls
        tls = HookTlsSpec(
            ca_cert_pem=given.ca_cert_pem,
            server_name_override=given.server_name_override,
            client_cert_pem=given.client_cert_pem,
            client_key_pem=given.client_key_pem,
        )
    return HookRegistrationSpec(
        plugin_id=registration.plugin_id,
        target=registration.target.address,
        bindings=tuple(bindings),
        tls=tls,
        session_id=session_id or registration.session_id,
    )


def registration_to_proto(spec: HookRegistrationSpec) -> hook_registration_pb2.HookRegistration:
    out = hook_registration_pb2.HookRegistration(
        plugin_id=spec.plugin_id,
        target=hook_registration_pb2.HookTarget(address=spec.target),
        session_id=spec.session_id,
        tenant=spec.tenant,
    )
    if spec.tls is not None:
        # The client key is input-only: never returned.
        out.target.tls.CopyFrom(
            hook_registration_pb2.HookTls(
                ca_cert_pem=spec.tls.ca_cert_pem,
                server_name_override=spec.tls.server_name_override,
                client_cert_pem=spec.tls.client_cert_pem,
            )
        )
    for binding in spec.bindings:
        item = out.hooks.add(
            name=hook_registration_pb2.HookName.Value(f"HOOK_NAME_{binding.name.upper()}"),
            priority=binding.priority,
            failure_policy=_FAILURE_POLICIES_OUT[binding.failure_policy],
            include_messages=_INCLUDE_MESSAGES_OUT[binding.include_messages],
            last_n=binding.last_n if binding.include_messages is IncludeMessages.LAST_N else 0,
        )
        if (d := _duration(binding.timeout_seconds)) is not None:
            item.timeout.CopyFrom(d)
    if spec.create_time is not None:
        out.create_time.CopyFrom(timestamp(spec.create_time))
    return out


def struct_from_dict(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


# ---------------------------------------------------------------------- RunSession


def attach_from_proto(request: run_session_api.RunSessionRequest | InvalidRequest) -> Attach:
    if isinstance(request, InvalidRequest):
        raise request.error
    if request.WhichOneof("command") != "attach":
        raise invalid_argument("attach", "the first RunSession message must be attach")
    attach = request.attach
    return Attach(
        session_id=attach.session_id,
        after_sequence=attach.after_sequence if attach.HasField("after_sequence") else None,
        on_disconnect=on_disconnect_from_proto(attach.on_disconnect),
    )


def command_from_proto(
    request: run_session_api.RunSessionRequest | InvalidRequest, on_disconnect: OnDisconnect
) -> Command:
    """Decodes one command; a command that cannot be decoded becomes a RejectedCommand (answered with
    its error) because only protocol errors end the stream."""
    if isinstance(request, InvalidRequest):
        return RejectedCommand(command_id=_command_id(request.message), error=request.error)
    which = request.WhichOneof("command")
    command_id = ""
    try:
        if which == "turn":
            turn = request.turn
            command_id = turn.command_id
            options = turn_options_from_proto(turn.options, "turn.options")
            return TurnCommand(
                command_id=command_id,
                parts=parts_from_proto(turn.input, "turn.input"),
                options=TurnOptions(busy_policy=options.busy_policy, on_disconnect=on_disconnect),
                idem=idempotency(turn, "turn.request_id"),
            )
        if which == "hosted_result":
            command_id = request.hosted_result.command_id
            check_token("hosted_result.call_id", request.hosted_result.call_id, required=True)
            return HostedResultCommand(
                command_id=command_id,
                call_id=request.hosted_result.call_id,
                result=hosted_result_from_proto(request.hosted_result, "hosted_result."),
            )
        if which == "inject":
            command_id = request.inject.command_id
            return InjectCommand(command_id=command_id, parts=parts_from_proto(request.inject.input, "inject.input"))
        if which == "stop":
            return StopCommand(command_id=request.stop.command_id)
        if which == "clear_stop":
            return ClearStopCommand(command_id=request.clear_stop.command_id)
        if which == "cancel":
            return CancelCommand(command_id=request.cancel.command_id, run_id=request.cancel.run_id)
        if which == "ping":
            return PingCommand()
        if which == "attach":
            raise invalid_argument("attach", "the stream is already attached")
        raise invalid_argument("command", "empty RunSession message")
    except ServiceError as error:
        return RejectedCommand(command_id=command_id, error=error)


def _command_id(request: Message | None) -> str:
    """The command id of a RunSession message, when it could be decoded."""
    which = request.WhichOneof("command") if isinstance(request, run_session_api.RunSessionRequest) else None
    return str(getattr(getattr(request, which), "command_id", "")) if which else ""


def run_output_to_proto(output: Output) -> run_session_api.RunSessionResponse:
    if isinstance(output, EventOut):
        return run_session_api.RunSessionResponse(event=event_to_proto(output.event))
    if isinstance(output, HeartbeatOut):
        return run_session_api.RunSessionResponse(
            heartbeat=run_session_api.Heartbeat(last_sequence=output.last_sequence)
        )
    result = run_session_api.CommandResult(command_id=output.command_id, run_id=output.run_id, accepted=output.accepted)
    if output.error is not None:
        result.status.CopyFrom(status_from_error(output.error))
    else:
        result.status.code = 0
    return run_session_api.RunSessionResponse(command_result=result)


# ---------------------------------------------------------------------- content


def parts_from_proto(parts: Any, field: str) -> tuple[ContentPart, ...]:
    out: list[ContentPart] = []
    for index, part in enumerate(parts):
        which = part.WhichOneof("part")
        if which == "text":
            out.append(TextPart(text=part.text.text))
        elif which == "image":
            out.append(ImagePart(mime_type=part.image.mime_type, data=part.image.data))
        elif which == "tool_result":
            raise invalid_argument(
                f"{field}[{index}].tool_result",
                "tool results are not turn input: use SubmitHostedToolResult (or RunSession hosted_result)",
            )
        else:
            raise invalid_argument(f"{field}[{index}]", "empty content part: set text or image")
    return tuple(out)


def parts_to_proto(parts: tuple[ContentPart, ...]) -> list[content_pb2.ContentPart]:
    out = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append(content_pb2.ContentPart(text=content_pb2.TextPart(text=part.text)))
        else:
            out.append(content_pb2.ContentPart(image=content_pb2.ImagePart(mime_type=part.mime_type, data=part.data)))
    return out


# ---------------------------------------------------------------------- events

_TRIGGERS = {
    ev.RunTrigger.TURN: event_pb2.RUN_TRIGGER_TURN,
    ev.RunTrigger.ENQUEUED_TURN: event_pb2.RUN_TRIGGER_ENQUEUED_TURN,
    ev.RunTrigger.STEER: event_pb2.RUN_TRIGGER_STEER,
}
_STOP_REASONS = {
    ev.StopReason.STOP: event_pb2.STOP_REASON_STOP,
    ev.StopReason.LENGTH: event_pb2.STOP_REASON_LENGTH,
    ev.StopReason.TOOL_USE: event_pb2.STOP_REASON_TOOL_USE,
    ev.StopReason.ERROR: event_pb2.STOP_REASON_ERROR,
    ev.StopReason.ABORTED: event_pb2.STOP_REASON_ABORTED,
    ev.StopReason.STOP_REQUESTED: event_pb2.STOP_REASON_STOP_REQUESTED,
}
_OUTCOMES = {
    ev.RunOutcome.COMPLETED: event_pb2.RUN_OUTCOME_COMPLETED,
    ev.RunOutcome.SUSPENDED: event_pb2.RUN_OUTCOME_SUSPENDED,
    ev.RunOutcome.STOPPED: event_pb2.RUN_OUTCOME_STOPPED,
    ev.RunOutcome.FAILED: event_pb2.RUN_OUTCOME_FAILED,
}
_RUN_REASONS = {reason: event_pb2.RunReason.Value(f"RUN_REASON_{reason.value}") for reason in ev.RunReason}
_COMPACTION = {
    ev.CompactionReason.MANUAL_REQUEST: event_pb2.COMPACTION_REASON_MANUAL_REQUEST,
    ev.CompactionReason.TOKEN_THRESHOLD: event_pb2.COMPACTION_REASON_TOKEN_THRESHOLD,
    ev.CompactionReason.CONTEXT_OVERFLOW: event_pb2.COMPACTION_REASON_CONTEXT_OVERFLOW,
}


def event_to_proto(event: ev.SequencedEvent) -> event_pb2.SessionEvent:
    """The hot path: called once per delta per stream, so it builds the message directly."""
    out = event_pb2.SessionEvent(
        sequence=event.sequence,
        session_id=event.session_id,
        run_id=event.run_id,
        create_time=timestamp(event.create_time),
    )
    body = event.body
    kind = body.kind
    if kind == "assistant_delta":
        out.assistant_delta.text = body.text  # type: ignore[union-attr]
    elif kind == "reasoning_delta":
        out.reasoning_delta.text = body.text  # type: ignore[union-attr]
    elif isinstance(body, ev.ReasoningEnd):
        out.reasoning_end.SetInParent()
    elif isinstance(body, ev.RunStarted):
        out.run_started.trigger = _TRIGGERS[body.trigger]
        out.run_started.request_id = body.request_id
        out.run_started.model_ref = body.model_ref
    elif isinstance(body, ev.ToolCall):
        out.tool_call.call_id = body.call_id
        out.tool_call.tool_name = body.tool_name
        out.tool_call.input_json = body.input_json
        out.tool_call.input.CopyFrom(_struct_from_json(body.input_json))
    elif isinstance(body, ev.ToolResult):
        out.tool_result.call_id = body.call_id
        out.tool_result.tool_name = body.tool_name
        out.tool_result.output.extend(parts_to_proto(body.output))
        out.tool_result.details_json = body.details_json
        if (value := _value_from_json(body.details_json)) is not None:
            out.tool_result.details.CopyFrom(value)
    elif isinstance(body, ev.ToolError):
        out.tool_error.call_id = body.call_id
        out.tool_error.tool_name = body.tool_name
        out.tool_error.error = body.error
        if (value := _value_from_json(body.details_json)) is not None:
            out.tool_error.details.CopyFrom(value)
    elif isinstance(body, ev.HostedToolCall):
        out.hosted_tool_call.call_id = body.call_id
        out.hosted_tool_call.tool_name = body.tool_name
        out.hosted_tool_call.input_json = body.input_json
        out.hosted_tool_call.input.CopyFrom(_struct_from_json(body.input_json))
        if body.deadline is not None:
            out.hosted_tool_call.deadline.CopyFrom(timestamp(body.deadline))
    elif isinstance(body, ev.UsageSnapshotEvent):
        out.usage_snapshot.CopyFrom(snapshot_to_proto(body.snapshot))
    elif isinstance(body, ev.CompactionStarted):
        out.compaction_started.reason = _COMPACTION[body.reason]
    elif isinstance(body, ev.CompactionFinished):
        f = out.compaction_finished
        f.reason = _COMPACTION[body.reason]
        f.tokens_after = body.tokens_after
        f.tokens_after_estimated = body.tokens_after_estimated
        f.compacted = body.compacted
        f.messages_before = body.messages_before
        f.messages_after = body.messages_after
        if body.error is not None:
            f.error.CopyFrom(status_from_detail(body.error))
    elif isinstance(body, ev.MessageInjected):
        out.message_injected.input.extend(parts_to_proto(body.input))
    elif isinstance(body, ev.TurnComplete):
        out.turn_complete.stop_reason = _STOP_REASONS[body.stop_reason]
        if body.error is not None:
            out.turn_complete.error.CopyFrom(status_from_detail(body.error))
    elif isinstance(body, ev.RunFinished):
        f2 = out.run_finished
        f2.outcome = _OUTCOMES[body.outcome]
        if body.reason is not None:
            f2.reason = _RUN_REASONS[body.reason]
        if body.stop_reason is not None:
            f2.stop_reason = _STOP_REASONS[body.stop_reason]
        if body.error is not None:
            f2.error.CopyFrom(status_from_detail(body.error))
        f2.pending_call_ids.extend(body.pending_call_ids)
        f2.usage.CopyFrom(usage_to_proto(body.usage))
    elif isinstance(body, ev.SessionResetEvent):
        out.session_reset.reason = body.reason
    return out


# ---------------------------------------------------------------------- transcript


def transcript_to_proto(entry: tr.TranscriptEntry) -> transcript_pb2.TranscriptEntry:
    out = transcript_pb2.TranscriptEntry(
        sequence=entry.sequence, timestamp=timestamp(entry.timestamp), run_id=entry.run_id
    )
    body = entry.body
    if isinstance(body, tr.SystemPromptEntry):
        out.system_prompt.prompt = body.prompt
        out.system_prompt.model_ref = body.model_ref
    elif isinstance(body, tr.MessageEntry):
        out.message.role = body.role
        out.message.content.extend(parts_to_proto(body.content))
        out.message.injected = body.injected
    elif isinstance(body, tr.AssistantEntry):
        out.assistant.text = body.text
        out.assistant.aborted = body.aborted
    elif isinstance(body, tr.ToolCallEntry):
        out.tool_call.call_id = body.call_id
        out.tool_call.tool_name = body.tool_name
        out.tool_call.input.CopyFrom(_struct_from_json(body.input_json))
    elif isinstance(body, tr.ToolResultEntry):
        out.tool_result.call_id = body.call_id
        out.tool_result.tool_name = body.tool_name
        out.tool_result.output.extend(parts_to_proto(body.output))
        out.tool_result.is_error = body.is_error
        if (value := _value_from_json(body.details_json)) is not None:
            out.tool_result.details.CopyFrom(value)
    elif isinstance(body, tr.CompactionEntry):
        out.compaction.summary = body.summary
        out.compaction.messages_before = body.messages_before
        out.compaction.messages_after = body.messages_after
    elif isinstance(body, tr.SessionResetEntry):
        out.session_reset.reason = body.reason
    return out
