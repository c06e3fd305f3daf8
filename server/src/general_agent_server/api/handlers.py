"""Registers a service's methods on a grpc.aio server with the request decoding of api/decoding.py instead
of the generated code's `FromString`. The method handlers are built from the service descriptor; the
servicer (the generated servicer class, subclassed) stays the implementation.

A request of a unary or server-streaming method that decoding refuses is answered with its error before
the servicer method runs. A client-streaming method receives InvalidRequest items in its request stream
and decides (RunSession answers a bad first message by ending the call, a bad later one with a
command_result)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from general_agent_server.api.decoding import InvalidRequest, decode_request
from general_agent_server.api.errors import abort

Behaviour = Callable[[Any, Any], Any]


def add_service(servicer: object, service: ServiceDescriptor, server: grpc.aio.Server) -> None:
    handlers = {method.name: method_handler(servicer, method) for method in service.methods}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


def method_handler(servicer: object, method: MethodDescriptor) -> grpc.RpcMethodHandler[Any, Any]:
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    behaviour: Behaviour = getattr(servicer, method.name)
    deserialize = functools.partial(decode_request, request_class)
    serialize = response_class.SerializeToString
    if method.client_streaming and method.server_streaming:
        return grpc.stream_stream_rpc_method_handler(behaviour, deserialize, serialize)
    if method.client_streaming:
        return grpc.stream_unary_rpc_method_handler(behaviour, deserialize, serialize)
    if method.server_streaming:
        return grpc.unary_stream_rpc_method_handler(_refusing_stream(behaviour), deserialize, serialize)
    return grpc.unary_unary_rpc_method_handler(_refusing_unary(behaviour), deserialize, serialize)


def _refusing_unary(behaviour: Behaviour) -> Behaviour:
    @functools.wraps(behaviour)
    async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, InvalidRequest):
            await abort(context, request.error)
        return await behaviour(request, context)

    return handle


def _refusing_stream(behaviour: Behaviour) -> Behaviour:
    # Not a generator itself: a valid request gets the servicer's stream as it is (no extra hop per item).
    def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        if isinstance(request, InvalidRequest):
            return refused_stream(context, request.error)
        stream: AsyncIterator[Any] = behaviour(request, context)
        return stream

    return handle


async def refused_stream(context: grpc.aio.ServicerContext[Any, Any], error: BaseException) -> AsyncIterator[Any]:
    """The stream of a call refused before its servicer runs: it ends the call with `error`'s status."""
    await abort(context, error)
    yield  # pragma: no cover  (makes this an async generator; abort never returns)


def with_behaviour(
    handler: grpc.RpcMethodHandler[Any, Any],
    *,
    unary: Callable[[Any], Any],
    stream: Callable[[Any], Any],
) -> grpc.RpcMethodHandler[Any, Any]:
    """`handler` (an interceptor's) with its behaviour wrapped: by `unary` where the method answers one response
    (unary_unary, stream_unary), by `stream` where it answers a stream (unary_stream, stream_stream)."""
    # RpcMethodHandler is a namedtuple at run time: swap in the wrapped behaviour.
    h: Any = handler
    for kind, wrap in (
        ("unary_unary", unary),
        ("unary_stream", stream),
        ("stream_stream", stream),
        ("stream_unary", unary),
    ):
        behaviour = getattr(h, kind)
        if behaviour is not None:
            wrapped: grpc.RpcMethodHandler[Any, Any] = h._replace(**{kind: wrap(behaviour)})
            return wrapped
    return handler
