"""Serve ``general_agent.v1.HookService`` from decorated async functions (docs/hooks.md).

Example::

    hooks = HookServer(plugin_id="my-host")

    @hooks.before_tool_call(priority=10, timeout=2.0)
    async def guard(
        event: hook_pb2.BeforeToolCallEvent, context: hook_pb2.HookContext
    ) -> hook_pb2.BeforeToolCallResult | None:
        if event.tool_name == "exec":
            return hook_pb2.BeforeToolCallResult(block=True, block_reason="no shell here")
        return None  # no opinion: the call proceeds

    async with hooks:  # serves on 127.0.0.1, on a port of its choosing
        async with await AgentClient.connect("127.0.0.1:50051") as client:
            await hooks.register(client)

Every hook of the service has a decorator attribute named after it (``hooks.message_sending``, ...) and
``hooks.on("name", ...)`` does the same by name. A handler gets the hook's typed event and the
``HookContext`` and returns the hook's typed result, or ``None`` for "no opinion" (answered as an OK
response with ``result`` unset). Void hooks have no result; what their handlers return is ignored.
Hooks without a handler answer UNIMPLEMENTED, which the server also reads as "no opinion". A handler
that raises is logged here and answered with INTERNAL; the server then applies the binding's failure
policy (``before_tool_call`` fails closed by default: the call is blocked).

Registrations persist on the server: a host going away for good should :meth:`HookServer.unregister`,
or its fail-closed hooks keep failing. The server dials the registered target, so it must be reachable
from the server. The operator's targets may be loopback or private hosts; a ``tenant``-role caller's must pass
the server's SSRF guard (or be on its ``ssrf_allow_hosts``).
"""

# `timeout=` is a gRPC deadline or a binding's per-call timeout, not a local asyncio.timeout.
# ruff: noqa: ASYNC109

from __future__ import annotations

import inspect
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeAlias, TypeVar

import grpc
from google.protobuf import duration_pb2
from google.protobuf.message import Message

from general_agent.client import DEFAULT_TIMEOUT, AgentClient
from general_agent.v1 import hook_pb2, hook_registration_pb2, hook_service_pb2

if TYPE_CHECKING:
    from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor

__all__ = [
    "HOOK_NAMES",
    "FailurePolicyName",
    "HookDecorator",
    "HookHandler",
    "HookServer",
    "IncludeMessagesName",
]

_LOG = logging.getLogger(__name__)

EventT = TypeVar("EventT", bound=Message)
ResultT = TypeVar("ResultT")

HookHandler: TypeAlias = Callable[[EventT, hook_pb2.HookContext], Awaitable[ResultT | None]]
"""An async handler: ``(event, context) -> result | None``; void hooks use ``ResultT = None``."""

FailurePolicyName: TypeAlias = Literal["FAIL_OPEN", "FAIL_CLOSED"]
IncludeMessagesName: TypeAlias = Literal["NONE", "LAST_N", "ALL"]

_INT32_MAX: Final = 2**31 - 1


# --------------------------------------------------------------------------- the hooks, from the descriptor
@dataclass(frozen=True, slots=True)
class _HookSpec:
    """One RPC of HookService: its wire name, enum value and message types (result: None for void hooks)."""

    name: str
    path: str
    enum_value: hook_registration_pb2.HookName.ValueType
    request_type: type[Message]
    response_type: type[Message]
    result_type: type[Message] | None


def _spec(service_name: str, method: MethodDescriptor) -> _HookSpec:
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", method.name).lower()  # BeforeToolCall -> before_tool_call
    result_field = method.output_type.fields_by_name.get("result")
    return _HookSpec(
        name=name,
        path=f"/{service_name}/{method.name}",
        enum_value=hook_registration_pb2.HookName.Value(f"HOOK_NAME_{name.upper()}"),
        request_type=getattr(hook_service_pb2, method.input_type.name),
        response_type=getattr(hook_service_pb2, method.output_type.name),
        result_type=None if result_field is None else _message_class(result_field),
    )


def _message_class(field: FieldDescriptor) -> type[Message]:
    """The generated hook_pb2 class of a message-typed field (results live in hook.proto)."""
    if field.message_type is None:
        raise TypeError(f"{field.full_name} is not a message field")
    message_class: type[Message] = getattr(hook_pb2, field.message_type.name)
    return message_class


_SERVICE: Final = hook_service_pb2.DESCRIPTOR.services_by_name["HookService"]
_SPECS: Final = {spec.name: spec for spec in (_spec(_SERVICE.full_name, m) for m in _SERVICE.methods)}

HOOK_NAMES: Final[tuple[str, ...]] = tuple(_SPECS)
"""Every hook's wire name, in service order (``before_model_resolve``, ...)."""


# --------------------------------------------------------------------------- bindings
@dataclass(frozen=True, slots=True)
class _Binding:
    """A handler with the options it is registered with."""

    spec: _HookSpec
    handler: HookHandler[Any, Any]
    priority: int
    timeout: float | None
    failure_policy: hook_registration_pb2.HookFailurePolicy.ValueType
    include_messages: hook_registration_pb2.HookIncludeMessages.ValueType
    last_n: int

    def to_proto(self) -> hook_registration_pb2.HookBinding:
        binding = hook_registration_pb2.HookBinding(
            name=self.spec.enum_value,
            priority=self.priority,
            failure_policy=self.failure_policy,
            include_messages=self.include_messages,
            last_n=self.last_n,
        )
        if self.timeout is not None:
            binding.timeout.CopyFrom(_duration(self.timeout))
        return binding


def _duration(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(seconds * 1e9))
    return duration


def _failure_policy(value: FailurePolicyName | int | None) -> hook_registration_pb2.HookFailurePolicy.ValueType:
    if value is None:
        return hook_registration_pb2.HOOK_FAILURE_POLICY_UNSPECIFIED
    if isinstance(value, str):
        return hook_registration_pb2.HookFailurePolicy.Value(f"HOOK_FAILURE_POLICY_{value}")
    policy = hook_registration_pb2.HookFailurePolicy.ValueType(value)
    hook_registration_pb2.HookFailurePolicy.Name(policy)  # raises ValueError for an unknown number
    return policy


def _include_messages(value: IncludeMessagesName | int | None) -> hook_registration_pb2.HookIncludeMessages.ValueType:
    if value is None:
        return hook_registration_pb2.HOOK_INCLUDE_MESSAGES_UNSPECIFIED
    if isinstance(value, str):
        return hook_registration_pb2.HookIncludeMessages.Value(f"HOOK_INCLUDE_MESSAGES_{value}")
    include = hook_registration_pb2.HookIncludeMessages.ValueType(value)
    hook_registration_pb2.HookIncludeMessages.Name(include)  # raises ValueError for an unknown number
    return include


def _binding(
    spec: _HookSpec,
    handler: HookHandler[Any, Any],
    *,
    priority: int,
    timeout: float | None,
    failure_policy: FailurePolicyName | int | None,
    include_messages: IncludeMessagesName | int | None,
    last_n: int,
) -> _Binding:
    """Checks the options here, so a mistake fails at decoration rather than at RegisterHooks."""
    # An object whose class has an async __call__ counts too.
    if not (inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)):
        raise TypeError(f"the {spec.name} handler must be an async function")
    if not -_INT32_MAX - 1 <= priority <= _INT32_MAX:
        raise ValueError(f"priority must fit in 32 bits, not {priority}")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout}")
    include = _include_messages(include_messages)
    if (include == hook_registration_pb2.HOOK_INCLUDE_MESSAGES_LAST_N) != (last_n > 0):
        raise ValueError("last_n must be positive with include_messages='LAST_N' and 0 otherwise")
    return _Binding(spec, handler, priority, timeout, _failure_policy(failure_policy), include, last_n)


class HookDecorator(Generic[EventT, ResultT]):
    """``@hooks.<hook>(priority=..., ...)``: binds an async handler to one hook (see :meth:`HookServer.on`)."""

    def __init__(self, server: HookServer, name: str) -> None:
        self._server = server
        self._name = name

    def __call__(
        self,
        *,
        priority: int = 0,
        timeout: float | None = None,
        failure_policy: FailurePolicyName | int | None = None,
        include_messages: IncludeMessagesName | int | None = None,
        last_n: int = 0,
    ) -> Callable[[HookHandler[EventT, ResultT]], HookHandler[EventT, ResultT]]:
        return self._server.on(
            self._name,
            priority=priority,
            timeout=timeout,
            failure_policy=failure_policy,
            include_messages=include_messages,
            last_n=last_n,
        )


# --------------------------------------------------------------------------- serving
async def _answer(binding: _Binding, plugin_id: str, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    spec = binding.spec
    try:
        result = await binding.handler(request.event, request.context)
        if result is None or spec.result_type is None:
            return spec.response_type()
        if not isinstance(result, spec.result_type):
            raise TypeError(f"returned {type(result).__name__}, expected {spec.result_type.__name__} or None")
        return spec.response_type(result=result)
    except Exception as error:
        _LOG.exception("hook %s of plugin %s failed", spec.name, plugin_id)
        # Only the exception type crosses to the server: its message may carry the host's secrets.
        await context.abort(grpc.StatusCode.INTERNAL, f"{spec.name} handler raised {type(error).__name__}")


class _Dispatcher(grpc.GenericRpcHandler):
    """Looks handlers up per call, so hooks decorated after start are served too; a hook without a
    handler gets no method handler, which gRPC answers with UNIMPLEMENTED."""

    def __init__(self, handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]) -> None:
        self._handlers = handlers  # the HookServer's live table, by RPC path

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        return self._handlers.get(handler_call_details.method)


class HookServer:
    """A host's HookService: decorate handlers, :meth:`start` it, :meth:`register` it with the server.

    ``async with hooks:`` starts it (if not started) and stops it on exit.
    """

    before_model_resolve: HookDecorator[hook_pb2.BeforeModelResolveEvent, hook_pb2.BeforeModelResolveResult]
    before_prompt_build: HookDecorator[hook_pb2.BeforePromptBuildEvent, hook_pb2.BeforePromptBuildResult]
    before_agent_start: HookDecorator[hook_pb2.BeforeAgentStartEvent, hook_pb2.BeforeAgentStartResult]
    llm_input: HookDecorator[hook_pb2.LlmInputEvent, None]
    llm_output: HookDecorator[hook_pb2.LlmOutputEvent, None]
    agent_end: HookDecorator[hook_pb2.AgentEndEvent, None]
    before_tool_call: HookDecorator[hook_pb2.BeforeToolCallEvent, hook_pb2.BeforeToolCallResult]
    after_tool_call: HookDecorator[hook_pb2.AfterToolCallEvent, None]
    tool_result_persist: HookDecorator[hook_pb2.ToolResultPersistEvent, hook_pb2.ToolResultPersistResult]
    before_message_write: HookDecorator[hook_pb2.BeforeMessageWriteEvent, hook_pb2.BeforeMessageWriteResult]
    session_start: HookDecorator[hook_pb2.SessionStartEvent, None]
    session_end: HookDecorator[hook_pb2.SessionEndEvent, None]
    before_compaction: HookDecorator[hook_pb2.BeforeCompactionEvent, None]
    after_compaction: HookDecorator[hook_pb2.AfterCompactionEvent, None]
    before_reset: HookDecorator[hook_pb2.BeforeResetEvent, None]
    subagent_spawning: HookDecorator[hook_pb2.SubagentSpawningEvent, hook_pb2.SubagentSpawningResult]
    subagent_delivery_target: HookDecorator[hook_pb2.SubagentDeliveryTargetEvent, hook_pb2.SubagentDeliveryTargetResult]
    subagent_spawned: HookDecorator[hook_pb2.SubagentSpawnedEvent, None]
    subagent_ended: HookDecorator[hook_pb2.SubagentEndedEvent, None]
    inbound_claim: HookDecorator[hook_pb2.InboundClaimEvent, hook_pb2.InboundClaimResult]
    before_dispatch: HookDecorator[hook_pb2.BeforeDispatchEvent, hook_pb2.BeforeDispatchResult]
    message_received: HookDecorator[hook_pb2.MessageReceivedEvent, None]
    message_sending: HookDecorator[hook_pb2.MessageSendingEvent, hook_pb2.MessageSendingResult]
    message_sent: HookDecorator[hook_pb2.MessageSentEvent, None]
    gateway_start: HookDecorator[hook_pb2.GatewayStartEvent, None]
    gateway_stop: HookDecorator[hook_pb2.GatewayStopEvent, None]

    def __init__(self, plugin_id: str) -> None:
        if not plugin_id.strip():
            raise ValueError("plugin_id must not be empty")
        self._plugin_id = plugin_id
        self._bindings: dict[str, _Binding] = {}  # by hook name, in decoration order
        self._method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}  # by RPC path
        self._server: grpc.aio.Server | None = None
        self._address = ""
        # The decorator attributes come from the service descriptor; the annotations above only type them.
        for name in HOOK_NAMES:
            setattr(self, name, HookDecorator[Any, Any](self, name))

    # ------------------------------------------------------------------ handlers
    def on(
        self,
        hook: str,
        *,
        priority: int = 0,
        timeout: float | None = None,
        failure_policy: FailurePolicyName | int | None = None,
        include_messages: IncludeMessagesName | int | None = None,
        last_n: int = 0,
    ) -> Callable[[HookHandler[Any, Any]], HookHandler[Any, Any]]:
        """Decorator binding an async handler to ``hook`` (a wire name such as ``"before_tool_call"``).

        ``priority``: higher runs first (default 0). ``timeout``: seconds per call (``None`` = the hook's
        server default). ``failure_policy``: ``"FAIL_OPEN"`` / ``"FAIL_CLOSED"`` (``None`` = the hook's
        default). ``include_messages``: ``"NONE"`` / ``"LAST_N"`` (with ``last_n``) / ``"ALL"``.
        One handler per hook; the handler is returned unchanged. Registering again (:meth:`register`)
        publishes handlers added after an earlier registration.
        """
        spec = _SPECS.get(hook)
        if spec is None:
            raise ValueError(f"unknown hook {hook!r}; hooks are {', '.join(HOOK_NAMES)}")

        def bind(handler: HookHandler[Any, Any]) -> HookHandler[Any, Any]:
            if hook in self._bindings:
                raise ValueError(f"hook {hook!r} already has a handler in plugin {self._plugin_id!r}")
            binding = _binding(
                spec,
                handler,
                priority=priority,
                timeout=timeout,
                failure_policy=failure_policy,
                include_messages=include_messages,
                last_n=last_n,
            )
            self._bindings[hook] = binding
            self._method_handlers[spec.path] = self._rpc_handler(binding)
            return handler

        return bind

    def _rpc_handler(self, binding: _Binding) -> grpc.RpcMethodHandler[Any, Any]:
        plugin_id = self._plugin_id

        async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            return await _answer(binding, plugin_id, request, context)

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=binding.spec.request_type.FromString,
            response_serializer=binding.spec.response_type.SerializeToString,
        )

    @property
    def plugin_id(self) -> str:
        return self._plugin_id

    @property
    def hooks(self) -> tuple[str, ...]:
        """The hooks with a handler, in decoration order."""
        return tuple(self._bindings)

    # ------------------------------------------------------------------ registration
    def registration(self, target: str | None = None) -> hook_registration_pb2.HookRegistration:
        """The registration of every handled hook, dialled at ``target`` (default: :attr:`address`).

        Use it directly for a session's own registrations (``Session.hook_registrations`` in CreateSession).
        """
        if not self._bindings:
            raise ValueError(f"plugin {self._plugin_id!r} has no hook handlers to register")
        return hook_registration_pb2.HookRegistration(
            plugin_id=self._plugin_id,
            target=hook_registration_pb2.HookTarget(address=target or self.address),
            hooks=[binding.to_proto() for binding in self._bindings.values()],
        )

    async def register(
        self,
        client: AgentClient | grpc.aio.Channel,
        *,
        target: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> hook_registration_pb2.HookRegistration:
        """RegisterHooks for the caller's tenant (replacing this plugin_id's registration); returns it as stored.

        ``target`` is the address the server dials (default: :attr:`address`; give it when the server
        reaches this host under another name). Raises :class:`~general_agent.errors.AgentError`.
        """
        request = hook_registration_pb2.RegisterHooksRequest(registration=self.registration(target))
        agent = _agent_client(client)
        # The client's call plumbing carries its metadata (auth), a request id and AgentError decoding.
        response: hook_registration_pb2.RegisterHooksResponse = await agent._unary(
            agent.stub.RegisterHooks, request, timeout
        )
        return response.registration

    async def unregister(
        self, client: AgentClient | grpc.aio.Channel, *, timeout: float | None = DEFAULT_TIMEOUT
    ) -> bool:
        """UnregisterHooks for this plugin_id; False when the server had no such registration."""
        agent = _agent_client(client)
        request = hook_registration_pb2.UnregisterHooksRequest(plugin_id=self._plugin_id)
        response: hook_registration_pb2.UnregisterHooksResponse = await agent._unary(
            agent.stub.UnregisterHooks, request, timeout
        )
        return response.removed

    # ------------------------------------------------------------------ life cycle
    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Serves the hooks on a gRPC server the host already runs (instead of :meth:`start`)."""
        server.add_generic_rpc_handlers((_Dispatcher(self._method_handlers),))

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        """Starts a grpc.aio server on ``host:port`` (0 = a free port) and returns its ``host:port``."""
        if self._server is not None:
            raise RuntimeError(f"hook server {self._plugin_id!r} is already started")
        server = grpc.aio.server()
        self.add_to_server(server)
        bind_host = f"[{host}]" if ":" in host and not host.startswith("[") else host  # IPv6 literal
        bound_port = server.add_insecure_port(f"{bind_host}:{port}")
        await server.start()
        self._server = server
        self._address = f"{bind_host}:{bound_port}"
        return self._address

    @property
    def address(self) -> str:
        """``host:port`` of the started server."""
        if not self._address:
            raise RuntimeError(f"hook server {self._plugin_id!r} is not started")
        return self._address

    async def stop(self, grace: float | None = None) -> None:
        """Stops the server (in-flight calls get ``grace`` seconds). Idempotent. Does not unregister."""
        server, self._server, self._address = self._server, None, ""
        if server is not None:
            await server.stop(grace)

    async def __aenter__(self) -> HookServer:
        if self._server is None:
            await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _agent_client(client: AgentClient | grpc.aio.Channel) -> AgentClient:
    return client if isinstance(client, AgentClient) else AgentClient.from_channel(client)
