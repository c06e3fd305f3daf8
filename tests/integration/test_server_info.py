"""GetServerInfo reports every limit in force: each ServerLimits field equals the setting it is named
after, checked with non-default values so a field left at 0 (or at a hard-coded default) fails."""

from __future__ import annotations

import grpc

from general_agent.v1 import agent_service_pb2_grpc
from general_agent.v1 import server_info_pb2 as server_info_api
from general_agent_server.config import SETTINGS
from tests.conftest import ServerFactory

# ServerLimits field → (setting, its non-default value, the value the field reports).
EXPECTED: dict[str, tuple[str, str, float]] = {
    "max_model_calls_per_run": ("max_model_calls_per_run", "7", 7),
    "max_tool_calls_per_run": ("max_tool_calls_per_run", "11", 11),
    "run_deadline": ("run_deadline", "123.5", 123.5),
    "model_request_timeout": ("model_request_timeout", "42", 42),
    "hosted_call_timeout": ("hosted_call_timeout", "300", 300),
    "max_queued_turns": ("max_queued_turns", "3", 3),
    "max_receive_message_length": ("max_receive_message_length", "9000000", 9_000_000),
    "max_image_bytes": ("max_image_bytes", "1000001", 1_000_001),
    "max_message_bytes": ("max_message_bytes", "2000002", 2_000_002),
    "event_retention_count": ("event_retention_count", "777", 777),
    "hosted_call_timeout_max": ("hosted_call_timeout_max", "3600", 3600),
    "enqueue_timeout": ("enqueue_timeout", "12", 12),
    "event_retention": ("event_retention_days", "1.5", 1.5 * 86_400),
    "max_tokens_cap": ("max_tokens_cap", "4096", 4096),
    "max_history_page_bytes": ("max_history_page_bytes", "65536", 65_536),
    "subscriber_buffer": ("subscriber_buffer", "321", 321),
    "tool_timeout": ("tool_timeout", "33", 33),
    "max_tool_output_chars": ("max_tool_output_chars", "5555", 5555),
    "exec_timeout": ("exec_timeout", "44", 44),
    "exec_timeout_max": ("exec_timeout_max", "99", 99),
    "checkpoint_max_count": ("checkpoint_max_count", "17", 17),
    "checkpoint_max_bytes": ("checkpoint_max_bytes", "123456", 123_456),
    "hook_max_payload_bytes": ("hook_max_payload_bytes", "4321", 4321),
    "web_fetch_max_chars_cap": ("web_fetch_max_chars_cap", "1234", 1234),
    "web_fetch_max_response_bytes": ("web_fetch_max_response_bytes", "54321", 54_321),
    "web_fetch_timeout": ("web_fetch_timeout_seconds", "7.25", 7.25),
    "web_fetch_max_redirects": ("web_fetch_max_redirects", "5", 5),
    "max_idle_sessions": ("max_idle_sessions", "13", 13),
    "max_idle_session_bytes": ("max_idle_session_bytes", "7654321", 7_654_321),
    "max_system_prompt_bytes": ("max_system_prompt_bytes", "100001", 100_001),
    "max_hosted_tools": ("max_hosted_tools", "9", 9),
    "max_hosted_tool_schema_bytes": ("max_hosted_tool_schema_bytes", "20002", 20_002),
    "max_hosted_tool_description_bytes": ("max_hosted_tool_description_bytes", "3003", 3003),
    "max_labels": ("max_labels", "19", 19),
    "max_label_key_chars": ("max_label_key_chars", "41", 41),
    "max_label_value_chars": ("max_label_value_chars", "99", 99),
    "max_allowed_tools": ("max_allowed_tools", "31", 31),
    "max_session_key_chars": ("max_session_key_chars", "77", 77),
    "max_hook_registrations": ("max_hook_registrations", "6", 6),
    "max_hook_tls_pem_bytes": ("max_hook_tls_pem_bytes", "8008", 8008),
    "max_concurrent_runs": ("max_concurrent_runs", "5", 5),
    # The calling tenant's (here `default`, which has no `[tenants.default]` table: the server's settings).
    "tenant_max_concurrent_runs": ("max_concurrent_runs_per_tenant", "3", 3),
    "tenant_max_sessions": ("max_sessions_per_tenant", "21", 21),
}
# Limits the server does not enforce: reported as 0, and no setting of that name exists yet.
NOT_ENFORCED: set[str] = set()


def _reported(limits: server_info_api.ServerLimits, name: str) -> float:
    value = getattr(limits, name)
    if limits.DESCRIPTOR.fields_by_name[name].message_type is not None:
        assert name in {f.name for f, _ in limits.ListFields()}, f"{name} is unset"
        return float(value.ToNanoseconds() / 1e9)
    return float(value)


async def test_every_server_limit_equals_its_setting(server_factory: ServerFactory) -> None:
    defaults = {s.name: s.default for s in SETTINGS}
    env = {}
    for field, (setting, raw, _) in EXPECTED.items():
        assert float(raw) != float(defaults[setting]), f"{field}: pick a non-default value"
        env["GENERAL_AGENT_" + setting.upper()] = raw
    server = await server_factory(env)
    async with grpc.aio.insecure_channel(server.address) as channel:
        info = await agent_service_pb2_grpc.AgentServiceStub(channel).GetServerInfo(
            server_info_api.GetServerInfoRequest()
        )
    fields = {f.name for f in server_info_api.ServerLimits.DESCRIPTOR.fields}
    assert fields == set(EXPECTED) | NOT_ENFORCED, "a ServerLimits field without an expected setting"
    assert info.tenant == "default"
    for field, (_, _, expected) in EXPECTED.items():
        assert _reported(info.limits, field) == expected, field
    for field in NOT_ENFORCED:
        assert field not in defaults
        assert _reported(info.limits, field) == 0
