"""Remote hook registrations (docs/hooks.md): a host's HookService target and the hooks it serves. The core
turns each binding into a registry handler through a HookDialer, which the transport implements (one
channel per target, a deadline on every call)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from general_agent_server.domain.codec import JsonCodec, json_codec
from general_agent_server.domain.errors import ServiceError, invalid_argument, quoted
from general_agent_server.domain.validation import DEFAULT_LIMITS, InputLimits, check_id, over_limit
from general_agent_server.hooks.payloads import DEFAULT_MAX_PAYLOAD_BYTES, IncludeMessages, MessageSelection
from general_agent_server.hooks.registry import HOOK_KINDS, FailurePolicy, HandlerFn, HookHandler


@dataclass(frozen=True, kw_only=True, slots=True)
class HookBindingSpec:
    name: str
    priority: int = 0
    timeout_seconds: float | None = None
    failure_policy: FailurePolicy = FailurePolicy.DEFAULT
    include_messages: IncludeMessages = IncludeMessages.NONE
    last_n: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class HookTlsSpec:
    """TLS for dialling a target. The client key is a secret: it lives in memory only (never stored,
    never listed), so a registration using mutual TLS must be made again after a restart."""

    ca_cert_pem: str = ""
    server_name_override: str = ""
    client_cert_pem: str = ""
    client_key_pem: str = field(default="", repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class HookRegistrationSpec:
    plugin_id: str
    target: str
    bindings: tuple[HookBindingSpec, ...]
    tls: HookTlsSpec | None = None
    tenant: str = ""
    session_id: str = ""
    create_time: datetime | None = None


# How a registration is stored (as a JSON document; never with a mutual-TLS client key, see hooks/admin.py).
HOOK_REGISTRATION: JsonCodec[HookRegistrationSpec] = json_codec(HookRegistrationSpec)


class HookDialer(Protocol):
    """Makes the handler that calls one hook of a remote HookService."""

    def handler(self, registration: HookRegistrationSpec, binding: HookBindingSpec) -> HandlerFn: ...

    async def close(self) -> None: ...


def check_registration(
    spec: HookRegistrationSpec, field: str = "registration", limits: InputLimits = DEFAULT_LIMITS
) -> None:
    try:
        check_id(f"{field}.plugin_id", spec.plugin_id)
    except ServiceError as exc:
        raise _invalid_hook(exc.field_violations[0].field, exc.field_violations[0].description) from None
    host, sep, port = spec.target.rpartition(":")
    if not sep or not host or not port.isdigit() or len(spec.target) > 512:
        raise _invalid_hook(f"{field}.target.address", "expected HOST:PORT")
    if not spec.bindings:
        raise _invalid_hook(f"{field}.hooks", "register at least one hook")
    seen: set[str] = set()
    for index, binding in enumerate(spec.bindings):
        if binding.name not in HOOK_KINDS:
            raise _invalid_hook(f"{field}.hooks[{index}].name", f"unknown hook {quoted(binding.name)}")
        if binding.name in seen:
            raise _invalid_hook(f"{field}.hooks[{index}].name", f"hook {quoted(binding.name)} listed twice")
        seen.add(binding.name)
        if binding.timeout_seconds is not None and binding.timeout_seconds <= 0:
            raise _invalid_hook(f"{field}.hooks[{index}].timeout", "must be positive")
        if binding.include_messages is IncludeMessages.LAST_N and binding.last_n <= 0:
            raise _invalid_hook(f"{field}.hooks[{index}].last_n", "must be positive with include_messages LAST_N")
    if spec.tls is not None:
        _check_tls(spec.tls, f"{field}.target.tls", limits)


def _check_tls(tls: HookTlsSpec, field: str, limits: InputLimits) -> None:
    if bool(tls.client_cert_pem) != bool(tls.client_key_pem):
        raise _invalid_hook(field, "client_cert_pem and client_key_pem go together")
    if len(tls.server_name_override) > 253:
        raise _invalid_hook(f"{field}.server_name_override", "is longer than a host name can be (253 characters)")
    limit = limits.max_hook_tls_pem_bytes
    for name in ("ca_cert_pem", "client_cert_pem", "client_key_pem"):
        size = len(getattr(tls, name).encode())
        if size > limit:
            raise over_limit(f"{field}.{name}", size, "bytes", "max_hook_tls_pem_bytes", limit, reason="INVALID_HOOK")


def _invalid_hook(field_path: str, description: str) -> ServiceError:
    return invalid_argument(field_path, description, reason="INVALID_HOOK")


def handlers_for(
    spec: HookRegistrationSpec, dialer: HookDialer, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> list[HookHandler]:
    return [
        HookHandler(
            plugin_id=spec.plugin_id,
            hook=binding.name,
            call=dialer.handler(spec, binding),
            priority=binding.priority,
            timeout_seconds=binding.timeout_seconds,
            failure_policy=binding.failure_policy,
            tenant=spec.tenant,
            scope=spec.session_id,
            messages=MessageSelection(
                include=binding.include_messages, last_n=binding.last_n, max_payload_bytes=max_payload_bytes
            ),
        )
        for binding in spec.bindings
    ]
