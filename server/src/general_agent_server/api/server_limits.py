"""GetServerInfo.limits: every limit the server enforces, from its settings (README, Configuration), with the
calling tenant's own bounds (its `[tenants.<name>]` table, docs/security.md)."""

from __future__ import annotations

from general_agent.v1 import server_info_pb2 as server_info_api
from general_agent_server.config import ServerSettings
from general_agent_server.domain.validation import InputLimits
from general_agent_server.tenants.rules import TenantRules

INPUT_LIMIT_NAMES = tuple(InputLimits.__dataclass_fields__)


def server_limits(settings: ServerSettings) -> server_info_api.ServerLimits:
    """ServerLimits of these settings."""
    limits = server_info_api.ServerLimits(
        max_concurrent_runs=settings.max_concurrent_runs,
        max_model_calls_per_run=settings.max_model_calls_per_run,
        max_tool_calls_per_run=settings.max_tool_calls_per_run,
        max_queued_turns=settings.max_queued_turns,
        max_receive_message_length=settings.max_receive_message_length,
        max_image_bytes=settings.max_image_bytes,
        max_message_bytes=settings.max_message_bytes,
        event_retention_count=settings.event_retention_count,
        max_tokens_cap=settings.max_tokens_cap,
        max_history_page_bytes=settings.max_history_page_bytes,
        subscriber_buffer=settings.subscriber_buffer,
        max_tool_output_chars=settings.max_tool_output_chars,
        checkpoint_max_count=settings.checkpoint_max_count,
        checkpoint_max_bytes=settings.checkpoint_max_bytes,
        hook_max_payload_bytes=settings.hook_max_payload_bytes,
        web_fetch_max_chars_cap=settings.web_fetch_max_chars_cap,
        web_fetch_max_response_bytes=settings.web_fetch_max_response_bytes,
        web_fetch_max_redirects=settings.web_fetch_max_redirects,
        max_idle_sessions=settings.max_idle_sessions,
        max_idle_session_bytes=settings.max_idle_session_bytes,
        # What a request may make the server keep per session.
        **{name: getattr(settings.input_limits, name) for name in INPUT_LIMIT_NAMES},
    )
    seconds = {
        "run_deadline": settings.run_deadline,
        "model_request_timeout": settings.model_request_timeout,
        "hosted_call_timeout": settings.hosted_call_timeout,
        "hosted_call_timeout_max": settings.hosted_call_timeout_max,
        "enqueue_timeout": settings.enqueue_timeout,
        "event_retention": settings.event_retention_days * 86_400,
        "tool_timeout": settings.tool_timeout,
        "exec_timeout": settings.exec_timeout,
        "exec_timeout_max": settings.exec_timeout_max,
        "web_fetch_timeout": settings.web_fetch_timeout_seconds,
    }
    for name, value in seconds.items():
        if value > 0:
            getattr(limits, name).FromNanoseconds(round(value * 1e9))
    return limits


def tenant_limits(
    limits: server_info_api.ServerLimits, rules: TenantRules, tenant: str
) -> server_info_api.ServerLimits:
    """`limits` with the bounds that apply to `tenant` filled in."""
    found = server_info_api.ServerLimits()
    found.CopyFrom(limits)
    found.tenant_max_concurrent_runs = rules.max_runs(tenant)
    found.tenant_max_sessions = rules.max_sessions(tenant)
    return found
