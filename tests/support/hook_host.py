"""A recording HookService host for integration tests.

Every RPC of `general_agent.v1.HookService` is served (the table is built from the service descriptor, so
a hook added to the proto is served without touching this file). Each call is recorded with its hook
name, `context.dispatch_seq`, typed request and gRPC metadata; a hook answers from the callable a test set
for it, else with an empty response (for modifying hooks: "no opinion"). Void hooks run concurrently on the server and
are not awaited, so tests wait for them with `wait_until` (a bounded poll), never with a sleep."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

import grpc
from google.protobuf.message import Message

from general_agent.v1 import hook_registration_pb2, hook_service_pb2

ServicerContext = grpc.aio.ServicerContext[Any, Any]
# Gets the typed request and the servicer context; returns the hook's typed result (e.g.
# hook_pb2.BeforeToolCallResult), or None for an empty response. It may abort the call through the context.
Answer = Callable[[Any, ServicerContext], Awaitable[Message | None]]

_SERVICE: Final = hook_service_pb2.DESCRIPTOR.services_by_name["HookService"]


def _hook_name(rpc: str) -> str:
    """`BeforeToolCall` -> `before_tool_call`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc).lower()


RPC_BY_HOOK: Final[Mapping[str, str]] = {_hook_name(m.name): m.name for m in _SERVICE.methods}

# The hooks the server fires by itself (docs/hooks.md); the other 7 are host-bridged or the gateway's.
SDK_NATIVE_HOOKS: Final = (
    "before_model_resolve",
    "before_agent_start",
    "before_prompt_build",
    "llm_input",
    "llm_output",
    "agent_end",
    "before_tool_call",
    "after_tool_call",
    "tool_result_persist",
    "before_message_write",
    "session_start",
    "session_end",
    "before_compaction",
    "after_compaction",
    "before_reset",
    "subagent_spawning",
    "subagent_delivery_target",
    "subagent_spawned",
    "subagent_ended",
)


@dataclass(frozen=True, slots=True)
class HookCall:
    hook: str
    seq: int
    request: Any  # the typed <Rpc>Request message
    metadata: Mapping[str, str] = field(default_factory=dict)  # the call's gRPC metadata (traceparent ...)

    @property
    def run_id(self) -> str:
        return str(self.request.context.run_id)


class HookHost:
    """One HookService endpoint on 127.0.0.1 (plaintext, or TLS with the given key and certificate)."""

    def __init__(self, answers: Mapping[str, Answer] | None = None) -> None:
        unknown = set(answers or {}) - set(RPC_BY_HOOK)
        if unknown:
            raise ValueError(f"not hooks of HookService: {sorted(unknown)}")
        self.answers: dict[str, Answer] = dict(answers or {})
        self.calls: list[HookCall] = []
        self.address = ""
        self._server: grpc.aio.Server | None = None

    # ------------------------------------------------------------------ serving
    def _method_handler(self, rpc: str) -> grpc.RpcMethodHandler[Any, Any]:
        method = _SERVICE.methods_by_name[rpc]
        request_type: type[Message] = getattr(hook_service_pb2, method.input_type.name)
        response_type: type[Message] = getattr(hook_service_pb2, method.output_type.name)
        hook = _hook_name(rpc)
        carries_result = "result" in method.output_type.fields_by_name

        async def behaviour(request: Any, context: ServicerContext) -> Message:
            metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
            seq = int(request.context.dispatch_seq)
            self.calls.append(HookCall(hook=hook, seq=seq, request=request, metadata=metadata))
            answer = self.answers.get(hook)
            result = await answer(request, context) if answer is not None else None
            if result is None or not carries_result:
                return response_type()
            return response_type(result=result)

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )

    async def start(self, *, tls_key_and_cert: tuple[bytes, bytes] | None = None) -> str:
        server = grpc.aio.server()
        handlers = {rpc: self._method_handler(rpc) for rpc in RPC_BY_HOOK.values()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
        if tls_key_and_cert is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([tls_key_and_cert]))
        await server.start()
        self._server = server
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    # ------------------------------------------------------------------ what was received
    def of(self, hook: str) -> list[HookCall]:
        return [c for c in self.calls if c.hook == hook]

    def names(self, hook: str | None = None) -> list[str]:
        return [c.hook for c in self.calls if hook is None or c.hook == hook]

    def in_run(self, run_id: str) -> list[HookCall]:
        """The calls of one run in pipeline order (void hooks may arrive out of order)."""
        return sorted((c for c in self.calls if c.run_id == run_id), key=lambda c: c.seq)

    async def wait_until(self, condition: Callable[[], bool], *, timeout: float = 10.0) -> None:
        await wait_until(condition, timeout=timeout, describe=lambda: f"calls: {self.names()}")

    async def wait_for(self, *hooks: str, timeout: float = 10.0) -> None:
        """Until every named hook was called at least once."""
        await self.wait_until(lambda: all(self.of(h) for h in hooks), timeout=timeout)


async def wait_until(
    condition: Callable[[], bool], *, timeout: float = 10.0, describe: Callable[[], str] = lambda: ""
) -> None:
    """A bounded poll: hook deliveries and exports happen after the RPC that caused them returns."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; {describe()}")
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------------- answers


def sleeping(seconds: float) -> Answer:
    async def answer(request: Any, context: ServicerContext) -> None:
        await asyncio.sleep(seconds)

    return answer


def aborting(code: grpc.StatusCode = grpc.StatusCode.INTERNAL, details: str = "handler exploded") -> Answer:
    async def answer(request: Any, context: ServicerContext) -> None:
        await context.abort(code, details)

    return answer


def returning(result: Message) -> Answer:
    async def answer(request: Any, context: ServicerContext) -> Message:
        return result

    return answer


# ---------------------------------------------------------------------- registrations


def binding(
    name: str,
    *,
    priority: int = 0,
    timeout: float | None = None,
    failure_policy: hook_registration_pb2.HookFailurePolicy.ValueType = (
        hook_registration_pb2.HOOK_FAILURE_POLICY_UNSPECIFIED
    ),
    include_messages: hook_registration_pb2.HookIncludeMessages.ValueType = (
        hook_registration_pb2.HOOK_INCLUDE_MESSAGES_UNSPECIFIED
    ),
    last_n: int = 0,
) -> hook_registration_pb2.HookBinding:
    result = hook_registration_pb2.HookBinding(
        name=hook_registration_pb2.HookName.Value(f"HOOK_NAME_{name.upper()}"),
        priority=priority,
        failure_policy=failure_policy,
        include_messages=include_messages,
        last_n=last_n,
    )
    if timeout is not None:
        result.timeout.FromTimedelta(timedelta(seconds=timeout))
    return result


def registration(
    plugin_id: str,
    address: str,
    bindings: Iterable[hook_registration_pb2.HookBinding | str],
    *,
    tls: hook_registration_pb2.HookTls | None = None,
) -> hook_registration_pb2.HookRegistration:
    """Bindings given by name get the defaults."""
    target = hook_registration_pb2.HookTarget(address=address)
    if tls is not None:
        target.tls.CopyFrom(tls)
    return hook_registration_pb2.HookRegistration(
        plugin_id=plugin_id,
        target=target,
        hooks=[binding(b) if isinstance(b, str) else b for b in bindings],
    )
