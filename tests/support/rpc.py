"""Small helpers for integration tests that talk through the generated stubs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import grpc
from google.rpc import status_pb2

from general_agent.errors import DOMAIN, AgentError
from general_agent.events import is_terminal
from general_agent.v1 import agent_service_pb2_grpc, content_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import kinds

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


def decode_error(error: grpc.RpcError) -> AgentError:
    """An aio or a blocking call's error, decoded by the Python client (`AgentError.from_rpc_error`): code,
    message, ErrorInfo reason and metadata, BadRequest field violations, RetryInfo delay. Fails unless the rich
    status agrees with the call's own code and message and names this service's domain."""
    decoded = AgentError.from_rpc_error(error)
    assert (decoded.code, decoded.message) == (error.code(), error.details() or ""), repr(decoded)
    _assert_our_domain(decoded)
    return decoded


def decode_status(status: status_pb2.Status) -> AgentError:
    """A `google.rpc.Status` message (a RunSession command_result's status, an event's error), decoded by the
    Python client (`AgentError.from_status`); fails unless an ErrorInfo in it names this service's domain."""
    decoded = AgentError.from_status(status)
    _assert_our_domain(decoded)
    return decoded


def _assert_our_domain(decoded: AgentError) -> None:
    if decoded.reason or decoded.domain:
        assert decoded.domain == DOMAIN, repr(decoded)


def text_input(*texts: str) -> list[content_pb2.ContentPart]:
    return [content_pb2.ContentPart(text=content_pb2.TextPart(text=t)) for t in texts]


async def create_session(stub: Stub, **session_fields: Any) -> session_pb2.Session:
    request_fields = {k: session_fields.pop(k) for k in ("request_id", "api_key") if k in session_fields}
    response = await stub.CreateSession(
        session_api.CreateSessionRequest(session=session_pb2.Session(**session_fields), **request_fields)
    )
    return response.session


async def get_session(stub: Stub, session_id: str) -> session_pb2.Session:
    return (await stub.GetSession(session_api.GetSessionRequest(session_id=session_id))).session


async def wait_idle(stub: Stub, session_id: str) -> session_pb2.Session:
    """Polls GetSession (bounded) until the session is IDLE; returns it."""
    for _ in range(1000):
        session = await get_session(stub, session_id)
        if session.state == session_pb2.SESSION_STATE_IDLE:
            return session
        await asyncio.sleep(0.01)
    raise AssertionError(f"session {session_id} did not become idle")


def turn_call(stub: Stub, session_id: str, *texts: str, **request_fields: Any) -> Any:
    """A StreamTurn call, not read yet."""
    return stub.StreamTurn(
        turn_api.StreamTurnRequest(session_id=session_id, input=text_input(*texts), **request_fields)
    )


async def stream_turn(stub: Stub, session_id: str, *texts: str, **request_fields: Any) -> list[Any]:
    return [response.event async for response in turn_call(stub, session_id, *texts, **request_fields)]


async def read_until(call: Any, kind: str) -> list[Any]:
    """Reads a StreamTurn (or other event-streaming) call up to and including the first event of `kind`."""
    seen = []
    async for response in call:
        seen.append(response.event)
        if response.event.WhichOneof("event") == kind:
            return seen
    raise AssertionError(f"the stream ended without {kind}: {kinds(seen)}")


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


async def watch_until_terminal(stub: Stub, session_id: str, after: int) -> list[Any]:
    """Follows the session's log (WatchSession) from `after` until a terminal run_finished (not SUSPENDED)."""
    events = []
    call = stub.WatchSession(turn_api.WatchSessionRequest(session_id=session_id, after_sequence=after))
    async for response in call:
        events.append(response.event)
        if is_terminal(response.event):
            call.cancel()
            break
    return events


async def rpc_error(awaitable: Any) -> AgentError:
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
