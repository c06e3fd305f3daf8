"""Compaction over gRPC against the real anthropic client and the fake server: RequestCompaction and
MaybeCompactByTokens answer the result, the compacted history survives a restart, GetServerInfo lists the
capability, and prompt-cache reads and writes are counted in the usage snapshot and the session's totals."""

from __future__ import annotations

from pathlib import Path

import grpc
from google.protobuf import duration_pb2

from general_agent.testing import FakeAnthropic, TextReply
from general_agent.v1 import event_pb2
from general_agent.v1 import server_info_pb2 as server_info_api
from general_agent.v1 import session_messages_pb2 as session_api
from general_agent_server.runs.summarise import SUMMARY_HEADER
from tests.conftest import ServerFactory
from tests.support.events import last_of
from tests.support.rpc import connect, create_session, rpc_error, stream_turn


async def test_request_compaction_summarises_and_survives_a_restart(
    server_factory: ServerFactory, fake_model: FakeAnthropic, tmp_path: Path
) -> None:
    state = tmp_path / "compaction-state"
    server = await server_factory(state_dir=state)
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        for index in range(3):
            fake_model.enqueue(TextReply(f"answer {index}"))
            await stream_turn(stub, sid, f"question {index}")
        fake_model.enqueue(TextReply("The user asked three questions."))
        answer = await stub.RequestCompaction(session_api.RequestCompactionRequest(session_id=sid))
        summary_request = fake_model.requests[-1]
    result = answer.result
    assert result.compacted
    assert result.reason == event_pb2.COMPACTION_REASON_MANUAL_REQUEST
    assert (result.messages_before, result.messages_after) == (6, 5)
    assert result.tokens_after > 0
    assert result.tokens_after_estimated
    assert "question 0" in summary_request.messages[0]["content"][0]["text"]
    await server.stop()

    restarted = await server_factory(state_dir=state)
    async with connect(restarted.address) as stub:
        history = await stub.GetSessionHistory(session_api.GetSessionHistoryRequest(session_id=sid))
        assert [e.WhichOneof("entry") for e in history.entries].count("compaction") == 1
        fake_model.enqueue(TextReply("go on"))
        await stream_turn(stub, sid, "next")
    sent = fake_model.requests[-1].messages
    # The summary and the first kept turn's message are consecutive user messages: the request merges them.
    assert sent[0]["content"][0]["text"].startswith(SUMMARY_HEADER)
    assert sent[0]["content"][1]["text"] == "question 1"
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]


async def test_maybe_compact_is_a_no_op_below_the_threshold_and_busy_is_refused(
    server_factory: ServerFactory, fake_model: FakeAnthropic
) -> None:
    server = await server_factory()
    async with connect(server.address) as stub:
        sid = (await create_session(stub)).identity.session_id
        fake_model.enqueue(TextReply("hi"))
        await stream_turn(stub, sid, "hello")
        answer = await stub.MaybeCompactByTokens(
            session_api.MaybeCompactByTokensRequest(session_id=sid, cooldown=duration_pb2.Duration(seconds=0))
        )
        bad = await rpc_error(
            stub.MaybeCompactByTokens(session_api.MaybeCompactByTokensRequest(session_id=sid, threshold_pct=101))
        )
        unknown = await rpc_error(stub.RequestCompaction(session_api.RequestCompactionRequest(session_id="nope")))
        info = await stub.GetServerInfo(server_info_api.GetServerInfoRequest())
    assert not answer.result.compacted
    assert answer.result.reason == event_pb2.COMPACTION_REASON_TOKEN_THRESHOLD
    assert (bad.code, bad.field_violations[0][0]) == (grpc.StatusCode.INVALID_ARGUMENT, "threshold_pct")
    assert (unknown.code, unknown.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    assert "compaction" in info.capabilities


async def test_prompt_cache_reads_and_writes_are_counted(server_factory: ServerFactory, tmp_path: Path) -> None:
    async with FakeAnthropic(prompt_cache=True) as fake:
        server = await server_factory({"ANTHROPIC_BASE_URL": fake.base_url})
        async with connect(server.address) as stub:
            sid = (await create_session(stub, system_prompt="You are terse. " * 200)).identity.session_id
            snapshots = []
            for index in range(3):
                fake.enqueue(TextReply(f"answer {index}"))
                events = await stream_turn(stub, sid, f"question {index}")
                snapshots.append(last_of(events, "usage_snapshot"))
                finished = last_of(events, "run_finished")
            usage = await stub.GetUsage(session_api.GetUsageRequest(session_id=sid))
    first, later = snapshots[0], snapshots[-1]
    # The second and third calls read the system prompt and tools (and earlier turns) from the cache.
    assert finished.usage.cache_read_input_tokens > 0
    assert usage.cumulative_usage.cache_read_input_tokens >= 2 * finished.usage.cache_read_input_tokens // 2
    assert usage.cumulative_usage.cache_creation_input_tokens > 0
    # The snapshot counts what fills the window: uncached input plus cache reads and writes.
    assert later.used_input_tokens > first.used_input_tokens
    assert usage.usage_snapshot.used_input_tokens == later.used_input_tokens
