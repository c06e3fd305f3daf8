"""The server dials the host's HookService (docs/hooks.md): one channel per target, reused; a deadline on
every call; UNIMPLEMENTED from the host is "no opinion". Events and results cross as the typed messages of
hook_service.proto, built from and read back into the camelCase JSON the runner merges."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from general_agent.v1 import hook_service_pb2, hook_service_pb2_grpc
from general_agent_server.api.interceptors import current_request_id
from general_agent_server.hooks.registrations import HookBindingSpec, HookRegistrationSpec, HookTlsSpec
from general_agent_server.hooks.registry import HandlerFn, JsonObject, default_timeout
from general_agent_server.observability.tracing import inject_trace_context

# Typed enums of hook results, back to the string values the runner merges (plugins and EmitHook use them).
_SPAWNING_STATUS = {"SUBAGENT_SPAWNING_STATUS_OK": "ok", "SUBAGENT_SPAWNING_STATUS_ERROR": "error"}


def _runner_shape(result: JsonObject) -> JsonObject:
    status = result.get("status")
    if isinstance(status, str) and status.startswith("SUBAGENT_SPAWNING_STATUS_"):
        value = _SPAWNING_STATUS.get(status)
        if value is None:
            result.pop("status")
        else:
            result["status"] = value
    return result


def rpc_name(hook: str) -> str:
    """`before_tool_call` → `BeforeToolCall`."""
    return "".join(part.capitalize() for part in hook.split("_"))


def _open_channel(target: str, tls: HookTlsSpec | None) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(target)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca_cert_pem.encode() or None,
        private_key=tls.client_key_pem.encode() or None,
        certificate_chain=tls.client_cert_pem.encode() or None,
    )
    options = [("grpc.ssl_target_name_override", tls.server_name_override)] if tls.server_name_override else []
    return grpc.aio.secure_channel(target, credentials, options=options)


class GrpcHookDialer:
    def __init__(self, *, trace_context: bool = False) -> None:
        # With tracing on, every call carries the W3C trace context of the hook handler's span (the runner's).
        self._trace_context = trace_context
        # One channel per distinct (target, TLS settings), reused by every hook of every registration.
        self._channels: dict[tuple[str, HookTlsSpec | None], grpc.aio.Channel] = {}

    def _stub(self, target: str, tls: HookTlsSpec | None) -> Any:
        channel = self._channels.get((target, tls))
        if channel is None:
            channel = _open_channel(target, tls)
            self._channels[(target, tls)] = channel
        return hook_service_pb2_grpc.HookServiceStub(channel)

    def handler(self, registration: HookRegistrationSpec, binding: HookBindingSpec) -> HandlerFn:
        name = rpc_name(binding.name)
        request_type = getattr(hook_service_pb2, f"{name}Request")
        timeout = binding.timeout_seconds or default_timeout(binding.name)

        async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
            request = json_format.ParseDict(
                {"event": event, "context": context}, request_type(), ignore_unknown_fields=True
            )
            method = getattr(self._stub(registration.target, registration.tls), name)
            try:
                response = await method(request, timeout=timeout, metadata=self._metadata())
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return None  # the host has no opinion on this hook
                raise RuntimeError(f"{error.code().name}: {error.details()}") from None
            if "result" not in response.DESCRIPTOR.fields_by_name or not response.HasField("result"):
                return None
            result: JsonObject = json_format.MessageToDict(response.result)
            return _runner_shape(result)

        return call

    def _metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The id of the request that started this work, for the host's logs; with tracing on, `traceparent`
        (and `tracestate`) of the current span, the hook handler's."""
        request_id = current_request_id()
        metadata = {"x-request-id": request_id} if request_id else {}
        if self._trace_context:
            inject_trace_context(metadata)
        return tuple(metadata.items()) or None

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
