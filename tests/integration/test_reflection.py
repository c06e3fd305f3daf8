"""Server reflection resolves every kind of symbol a reflection client asks for (a live server on port 0, the
reflection protocol spoken directly): methods (which the grpcio-reflection servicer alone answers NOT_FOUND),
services, messages, enums, enum values, fields, oneofs and nested messages, each with the file that declares
it first and that file's dependencies after it; an unknown symbol stays NOT_FOUND."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from general_agent_server.app import RunningServer

# grpcio-reflection ships no type information.
Reflection: TypeAlias = Any
Response: TypeAlias = Any


@pytest.fixture
async def reflection(server: RunningServer) -> AsyncIterator[Reflection]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield reflection_pb2_grpc.ServerReflectionStub(channel)


async def ask(stub: Reflection, request: Any) -> Response:
    call = stub.ServerReflectionInfo(iter([request]))
    responses = [response async for response in call]
    assert len(responses) == 1
    response: Response = responses[0]
    assert response.original_request == request
    return response


async def files_containing(stub: Reflection, symbol: str) -> list[descriptor_pb2.FileDescriptorProto]:
    response = await ask(stub, reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol))
    assert response.WhichOneof("message_response") == "file_descriptor_response", response.error_response
    return [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in response.file_descriptor_response.file_descriptor_proto
    ]


@pytest.mark.parametrize(
    ("symbol", "file"),
    [
        ("general_agent.v1.AgentService.StreamTurn", "general_agent/v1/agent_service.proto"),
        ("general_agent.v1.AgentService.GetSession", "general_agent/v1/agent_service.proto"),
        ("grpc.health.v1.Health.Check", "grpc_health/v1/health.proto"),
        ("general_agent.v1.AgentService", "general_agent/v1/agent_service.proto"),
        ("general_agent.v1.Session", "general_agent/v1/session.proto"),
        ("general_agent.v1.SessionMode", "general_agent/v1/session.proto"),
        ("general_agent.v1.SESSION_MODE_CODING", "general_agent/v1/session.proto"),
        ("general_agent.v1.Session.identity", "general_agent/v1/session.proto"),
        ("general_agent.v1.SessionEvent.event", "general_agent/v1/event.proto"),
        ("google.protobuf.Struct.FieldsEntry", "google/protobuf/struct.proto"),
    ],
)
async def test_a_symbol_resolves_to_its_file_first(reflection: Reflection, symbol: str, file: str) -> None:
    files = await files_containing(reflection, symbol)

    assert files[0].name == file


async def test_a_method_comes_with_its_service_and_the_files_it_imports(reflection: Reflection) -> None:
    files = await files_containing(reflection, "general_agent.v1.AgentService.StreamTurn")

    [service] = files[0].service
    assert service.name == "AgentService"
    stream_turn = next(m for m in service.method if m.name == "StreamTurn")
    assert (stream_turn.input_type, stream_turn.output_type, stream_turn.server_streaming) == (
        ".general_agent.v1.StreamTurnRequest",
        ".general_agent.v1.StreamTurnResponse",
        True,
    )
    names = {f.name for f in files}
    assert set(files[0].dependency) <= names  # a client can build the descriptors from this answer alone
    assert {"general_agent/v1/event.proto", "google/protobuf/struct.proto"} <= names


@pytest.mark.parametrize(
    "symbol",
    ["general_agent.v1.AgentService.NoSuchMethod", "general_agent.v1.NoSuchThing", "general_agent", ""],
)
async def test_an_unknown_symbol_is_not_found(reflection: Reflection, symbol: str) -> None:
    response = await ask(reflection, reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol))

    assert response.WhichOneof("message_response") == "error_response"
    assert response.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_the_library_still_answers_the_other_requests(reflection: Reflection) -> None:
    listed = await ask(reflection, reflection_pb2.ServerReflectionRequest(list_services=""))
    by_name = await ask(
        reflection, reflection_pb2.ServerReflectionRequest(file_by_filename="general_agent/v1/session.proto")
    )

    assert {s.name for s in listed.list_services_response.service} == {
        "general_agent.v1.AgentService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    first = descriptor_pb2.FileDescriptorProto.FromString(by_name.file_descriptor_response.file_descriptor_proto[0])
    assert first.name == "general_agent/v1/session.proto"
