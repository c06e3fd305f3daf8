"""The HTTP client under the anthropic SDK (`model_http_client`): aiohttp, the default, or httpx. Both stream a turn
and end a broken stream the same way, and a request body over aiohttp's 1 MiB warning threshold goes out even in a
process where warnings are errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import anthropic
import grpc
import pytest

from general_agent.testing import CutStreamReply, FakeAnthropic, HangReply, TextReply
from general_agent.v1 import event_pb2
from general_agent_server.model.port import HTTP_CLIENTS
from tests.conftest import ServerFactory
from tests.support.events import last_of, text_of
from tests.support.rpc import connect, create_session, stream_turn


@pytest.mark.parametrize("http_client", HTTP_CLIENTS)
async def test_either_http_client_streams_a_turn_and_maps_a_cut_and_a_timeout_alike(
    server_factory: ServerFactory, fake_model: FakeAnthropic, http_client: str
) -> None:
    """`model_http_client` picks the HTTP client under the SDK (aiohttp by default); a whole reply, a connection cut
    before `message_stop` and a read timeout mid-stream end the same way on both."""
    server = await server_factory(
        {"GENERAL_AGENT_MODEL_HTTP_CLIENT": http_client, "GENERAL_AGENT_MODEL_REQUEST_TIMEOUT": "0.3"}
    )
    sdk_clients = [endpoint.client._client for endpoint in server.model._clients.values()]
    assert [isinstance(c, anthropic.DefaultAioHttpClient) for c in sdk_clients] == [http_client == "aiohttp"]
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        fake_model.enqueue(TextReply("whole answer", chunks=["whole ", "answer"]))
        events = await stream_turn(stub, sid, "first")
        assert text_of(events) == "whole answer"
        assert last_of(events, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED

        fake_model.enqueue(
            CutStreamReply(after_events=4, reply=TextReply("half an answer", chunks=["half ", "an answer"]))
        )
        finished = last_of(await stream_turn(stub, sid, "second"), "run_finished")
        assert finished.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert "message_stop" in finished.error.message

        hang = HangReply(after_events=4, reply=TextReply("never finished", chunks=["never ", "finished"]))
        fake_model.enqueue(hang)
        try:
            finished = last_of(await stream_turn(stub, sid, "third"), "run_finished")
        finally:
            hang.release()
        assert finished.reason == event_pb2.RUN_REASON_PROVIDER_ERROR
        assert finished.error.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]


_LARGE_BODY_PROBE = textwrap.dedent(
    """
    import asyncio
    from general_agent.testing import FakeAnthropic, TextReply
    from general_agent_server.model.anthropic import AnthropicModelClient
    from general_agent_server.model.port import Credential, MessageComplete, ModelRequest

    async def main():
        async with FakeAnthropic() as fake:
            fake.enqueue(TextReply("read it all"))
            client = AnthropicModelClient(timeout_seconds=10, max_retries=0)
            credential = Credential(api_key="sk-ant-large-body-test-0000", base_url=fake.base_url)
            request = ModelRequest(
                model="claude-sonnet-4-6",
                max_tokens=64,
                system=[{"type": "text", "text": "p" * (3 << 19)}],
                messages=[{"role": "user", "content": "hi"}],
            )
            try:
                events = [event async for event in client.stream(request, credential)]
            finally:
                await client.close()
            complete = events[-1]
            assert isinstance(complete, MessageComplete), events
            print(complete.content, len(fake.requests[-1].system_text))

    asyncio.run(main())
    """
)


def test_a_request_body_over_one_mib_goes_out_where_warnings_are_errors() -> None:
    """aiohttp warns (ResourceWarning) about every request body over 1 MiB sent as bytes; a server run with
    `-W error` must still send a long history. In a child interpreter: this suite's own warning filters would hide
    what a server process does."""
    run = subprocess.run(
        [sys.executable, "-W", "error", "-c", _LARGE_BODY_PROBE], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == f"[{{'type': 'text', 'text': 'read it all'}}] {3 << 19}"
