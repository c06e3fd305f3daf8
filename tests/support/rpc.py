"""Small helpers for integration tests that talk through the generated stubs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from general_agent.v1 import agent_service_pb2_grpc, content_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api

if TYPE_CHECKING:
    # The async stub type exists only in the generated .pyi (mypy-protobuf); at run time it is the same class.
    Stub = agent_service_pb2_grpc.AgentServiceAsyncStub
else:
    Stub = agent_service_pb2_grpc.AgentServiceStub


@asynccontextmanager
async def connect(address: str) -> AsyncIterator[Stub]:
    """A stub on a fresh channel to `address`, closed afterwards."""
    async with grpc.aio.insecure_channel(address) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel)


@dataclass
class DecodedError:
    code: grpc.StatusCode
    message: str
    reason: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    field_violations: list[tuple[str, str]] = field(default_factory=list)
    retry_delay: float | None = None


def decode_error(error: grpc.RpcError) -> DecodedError:
    """Of an aio or a blocking call's error (both carry code, details and trailing metadata)."""
    failed: Any = error
    decoded = DecodedError(code=failed.code(), message=failed.details() or "")
    for key, value in failed.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    assert info.domain == "general-agent"
                    decoded.reason = info.reason
                    decoded.metadata = dict(info.metadata)
                elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    detail.Unpack(bad)
                    decoded.field_violations = [(v.field, v.description) for v in bad.field_violations]
                elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    retry = error_details_pb2.RetryInfo()
                    detail.Unpack(retry)
                    decoded.retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
    return decoded


def text_input(*texts: str) -> list[content_pb2.ContentPart]:
    return [content_pb2.ContentPart(text=content_pb2.TextPart(text=t)) for t in texts]


async def create_session(stub: Stub, **session_fields: Any) -> session_pb2.Session:
    request_fields = {k: session_fields.pop(k) for k in ("request_id", "api_key") if k in session_fields}
    response = await stub.CreateSession(
        session_api.CreateSessionRequest(session=session_pb2.Session(**session_fields), **request_fields)
    )
    return response.session


async def stream_turn(stub: Stub, session_id: str, *texts: str, **request_fields: Any) -> list[Any]:
    request = turn_api.StreamTurnRequest(session_id=session_id, input=text_input(*texts), **request_fields)
    return [response.event async for response in stub.StreamTurn(request)]


async def events_after(stub: Stub, session_id: str, after: int, until_sequence: int) -> list[Any]:
    """Replays the durable log up to a known sequence (WatchSession)."""
    events = []
    call = stub.WatchSession(turn_api.WatchSessionRequest(session_id=session_id, after_sequence=after))
    async for response in call:
        events.append(response.event)
        if response.event.sequence >= until_sequence:
            call.cancel()
            break
    return events


async def rpc_error(awaitable: Any) -> DecodedError:
    """Awaits a unary call (or drains a stream) that must fail, and decodes its status."""
    try:
        if hasattr(awaitable, "__aiter__"):
            async for _ in awaitable:
                pass
        else:
            await awaitable
    except grpc.aio.AioRpcError as error:
        return decode_error(error)
    raise AssertionError("the call succeeded but an error was expected")
