"""Server reflection: the grpcio-reflection servicer, answering method symbols as well.

Tools pointed at a gRPC server resolve what they call by symbol: `grpcurl describe
general_agent.v1.AgentService.StreamTurn` and the `ghz` load tester (`--call general_agent.v1.AgentService/GetSession`)
ask for the file containing a method's full name. The library's servicer looks every symbol up with the descriptor
pool's `FindFileContainingSymbol`, which (in the upb protobuf runtime) knows services, messages, fields, oneofs,
enums, enum values and extensions but not methods, so those requests answered NOT_FOUND ("Symbol not found").
This servicer answers a method symbol with its service's file (and its dependencies) and leaves every other
request, and every other symbol, to the library."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc


class ReflectionServicer(reflection.aio.ReflectionServicer):  # type: ignore[misc]  # the library is untyped
    def _file_containing_symbol(self, request: Any, fully_qualified_name: str) -> Any:
        response = super()._file_containing_symbol(request, fully_qualified_name)
        if not response.HasField("error_response"):
            return response
        try:
            method = self._pool.FindMethodByName(fully_qualified_name)
        except KeyError:
            return response  # not a method either: the library's NOT_FOUND
        return self._file_by_filename(request, method.containing_service.file.name)


def enable_server_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serves reflection for `service_names` (the reflection service itself is listed too)."""
    names = (*service_names, reflection.SERVICE_NAME)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(ReflectionServicer(names), server)
