"""The server dials the host's HookService (spec 7): one channel per target, reused; a deadline on every
call; UNIMPLEMENTED from the host is "no opinion". Events and results cross as the typed messages of
hook_service.proto, built from and read back into the seed-shaped JSON the runner merges."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from general_agent.v1 import hook_service_pb2, hook_service_pb2_grpc
from general_agent_server.core.hook_registrations import HookBindingSpec, HookRegistrationSpec
from general_agent_server.core.hooks import HandlerFn, JsonObject, default_timeout


def rpc_name(hook: str) -> str:
    """`before_tool_call` → `BeforeToolCall`."""
    return "".join(part.capitalize() for part in hook.split("_"))


class GrpcHookDialer:
    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, target: str) -> Any:
        channel = self._channels.get(target)
        if channel is None:
            channel = grpc.aio.insecure_channel(target)
            self._channels[target] = channel
        return hook_service_pb2_grpc.HookServiceStub(channel)

    def handler(self, registration: HookRegistrationSpec, binding: HookBindingSpec) -> HandlerFn:
        name = rpc_name(binding.name)
        request_type = getattr(hook_service_pb2, f"{name}Request")
        timeout = binding.timeout_seconds or default_timeout(binding.name)

        async def call(event: JsonObject, context: JsonObject) -> JsonObject | None:
            request = json_format.ParseDict(
                {"event": event, "context": context}, request_type(), ignore_unknown_fields=True
            )
            method = getattr(self._stub(registration.target), name)
            try:
                response = await method(request, timeout=timeout)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return None  # the host has no opinion on this hook
                raise RuntimeError(f"{error.code().name}: {error.details()}") from None
            if "result" not in response.DESCRIPTOR.fields_by_name or not response.HasField("result"):
                return None
            result: JsonObject = json_format.MessageToDict(response.result)
            return result

        return call

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
