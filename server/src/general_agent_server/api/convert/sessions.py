"""Sessions: identity, configuration, hosted tool definitions, overrides, usage, the Session resource and
list queries."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from general_agent.v1 import hosted_tool_pb2, mcp_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.api.convert.hooks import registration_from_proto
from general_agent_server.api.convert.values import duration, json_text, seconds, timestamp
from general_agent_server.domain.context import SessionView
from general_agent_server.domain.errors import invalid_argument
from general_agent_server.domain.json_values import parse_json
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
from general_agent_server.hooks.registrations import HookRegistrationSpec
from general_agent_server.store.port import SessionQuery

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
            recall_top_k=session.memory.recall_top_k,
            recall_budget_chars=session.memory.recall_budget_chars,
        ),
        labels=dict(session.labels),
        limits=SessionLimits(
            max_model_calls_per_run=limits.max_model_calls_per_run,
            max_tool_calls_per_run=limits.max_tool_calls_per_run,
            run_deadline_seconds=seconds(limits.run_deadline, limits.HasField("run_deadline")),
            hosted_call_timeout_seconds=seconds(limits.hosted_call_timeout, limits.HasField("hosted_call_timeout")),
        ),
        auto_compaction=AutoCompaction(
            threshold_pct=session.auto_compaction.threshold_pct,
            cooldown_seconds=seconds(session.auto_compaction.cooldown, session.auto_compaction.HasField("cooldown")),
        ),
        hosted_tools=tuple(
            hosted_tool_from_proto(t, f"session.hosted_tools[{i}]") for i, t in enumerate(session.hosted_tools)
        ),
        mcp_servers={name: json_text(cfg) for name, cfg in session.mcp_servers.items()},
        disabled_mcp_servers=tuple(session.disabled_mcp_servers),
        approval_policy=policy_from_proto(session, "session.approval_policy"),
    )


def policy_from_proto(message: Any, field: str) -> tuple[str, ...] | None:
    """An absent policy is None (the server's default); a present, empty one asks for nothing."""
    if not message.HasField("approval_policy"):
        return None
    entries = tuple(message.approval_policy.entries)
    for i, entry in enumerate(entries):
        if not entry or len(entry) > 128 or entry != entry.strip():
            raise invalid_argument(f"{field}.entries[{i}]", "must be a tool name, `mutating` or `all` (1-128 chars)")
    if len(entries) > 256:
        raise invalid_argument(f"{field}.entries", "has more than 256 entries")
    return entries


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
        timeout_seconds=seconds(tool.timeout, tool.HasField("timeout")),
    )


def hosted_tool_to_proto(tool: HostedToolDefinition) -> hosted_tool_pb2.HostedToolDefinition:
    out = hosted_tool_pb2.HostedToolDefinition(
        name=tool.name, description=tool.description, input_schema_json=json.dumps(dict(tool.input_schema))
    )
    out.input_schema.update(dict(tool.input_schema))
    if (d := duration(tool.timeout_seconds)) is not None:
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
        approval_policy=policy_from_proto(overrides, "overrides.approval_policy"),
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
        # The view's map is masked already (sessions/service.py): no env or header value leaves here.
        mcp_servers={
            name: json_format.ParseDict(dict(v), mcp_pb2.McpServerConfig()) for name, v in c.mcp_servers.items()
        },
        disabled_mcp_servers=list(c.disabled_mcp_servers),
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
        approved_tools=list(r.approved_tools),
    )
    if c.approval_policy is not None:
        session.approval_policy.SetInParent()
        session.approval_policy.entries.extend(c.approval_policy)
    session.memory.user_id = c.memory.user_id
    session.memory.agent_id = c.memory.agent_id
    session.memory.recall_top_k = c.memory.recall_top_k
    session.memory.recall_budget_chars = c.memory.recall_budget_chars
    if c.memory.enabled is not None:
        session.memory.enabled = c.memory.enabled
    limits = session.limits
    limits.max_model_calls_per_run = c.limits.max_model_calls_per_run
    limits.max_tool_calls_per_run = c.limits.max_tool_calls_per_run
    if (d := duration(c.limits.run_deadline_seconds)) is not None:
        limits.run_deadline.CopyFrom(d)
    if (d := duration(c.limits.hosted_call_timeout_seconds)) is not None:
        limits.hosted_call_timeout.CopyFrom(d)
    session.auto_compaction.threshold_pct = c.auto_compaction.threshold_pct
    if (d := duration(c.auto_compaction.cooldown_seconds)) is not None:
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
