"""Pure protobuf ↔ domain conversions, one module per noun. Nothing here does I/O or holds state.

The transport (the RPC modules api/*_rpcs.py) calls them through this package."""

from general_agent_server.api.convert.approvals import answer_from_proto
from general_agent_server.api.convert.checkpoints import checkpoint_to_proto
from general_agent_server.api.convert.content import parts_from_proto, parts_to_proto
from general_agent_server.api.convert.events import event_to_proto
from general_agent_server.api.convert.hooks import hook_name, registration_from_proto, registration_to_proto
from general_agent_server.api.convert.run_session import attach_from_proto, command_from_proto, run_output_to_proto
from general_agent_server.api.convert.sessions import (
    config_from_proto,
    hosted_tool_from_proto,
    hosted_tool_to_proto,
    identity_from_proto,
    mode_from_proto,
    overrides_from_proto,
    query_from_proto,
    session_registrations,
    session_to_proto,
    snapshot_to_proto,
    thinking_from_proto,
    usage_to_proto,
)
from general_agent_server.api.convert.transcript import transcript_to_proto
from general_agent_server.api.convert.turns import (
    hosted_result_from_proto,
    on_disconnect_from_proto,
    turn_options_from_proto,
)
from general_agent_server.api.convert.values import body_hash, idempotency, struct_from_dict, timestamp

__all__ = [
    "answer_from_proto",
    "attach_from_proto",
    "body_hash",
    "checkpoint_to_proto",
    "command_from_proto",
    "config_from_proto",
    "event_to_proto",
    "hook_name",
    "hosted_result_from_proto",
    "hosted_tool_from_proto",
    "hosted_tool_to_proto",
    "idempotency",
    "identity_from_proto",
    "mode_from_proto",
    "on_disconnect_from_proto",
    "overrides_from_proto",
    "parts_from_proto",
    "parts_to_proto",
    "query_from_proto",
    "registration_from_proto",
    "registration_to_proto",
    "run_output_to_proto",
    "session_registrations",
    "session_to_proto",
    "snapshot_to_proto",
    "struct_from_dict",
    "thinking_from_proto",
    "timestamp",
    "transcript_to_proto",
    "turn_options_from_proto",
    "usage_to_proto",
]
