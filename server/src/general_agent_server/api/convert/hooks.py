"""Hook registrations: bindings, failure and history policies, TLS (the client key is input-only)."""

from __future__ import annotations

from general_agent.v1 import hook_registration_pb2
from general_agent_server.api.convert.values import duration, seconds, timestamp
from general_agent_server.domain.errors import invalid_argument
from general_agent_server.hooks.payloads import IncludeMessages
from general_agent_server.hooks.registrations import HookBindingSpec, HookRegistrationSpec, HookTlsSpec
from general_agent_server.hooks.registry import FailurePolicy

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
                timeout_seconds=seconds(binding.timeout, binding.HasField("timeout")),
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
        if (d := duration(binding.timeout_seconds)) is not None:
            item.timeout.CopyFrom(d)
    if spec.create_time is not None:
        out.create_time.CopyFrom(timestamp(spec.create_time))
    return out
