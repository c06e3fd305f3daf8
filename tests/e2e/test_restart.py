"""Real subprocess restarts: a SIGKILLed server loses nothing committed, marks interrupted runs, and the
next process continues the conversation with the stored history."""

from __future__ import annotations

from general_agent.testing import FakeAnthropicThread, TextReply
from general_agent.v1 import event_pb2, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.support.events import last_of, text_of
from tests.support.rpc import connect, create_session, events_after, stream_turn
from tests.support.runs import start_hanging_run
from tests.support.subprocess_server import ServerProcesses


async def test_history_survives_sigkill_and_resume(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    server = server_processes.make()
    address = server.start()
    fake_model_thread.enqueue(TextReply("The code word is BLUE."))
    async with connect(address) as stub:
        session = await create_session(stub, system_prompt="remember things")
        sid = session.identity.session_id
        first = await stream_turn(stub, sid, "Remember the code word.")
        assert text_of(first) == "The code word is BLUE."
    server.kill()  # SIGKILL: no shutdown path runs

    address = server.start()
    fake_model_thread.enqueue(TextReply("It was BLUE."))
    async with connect(address) as stub:
        resumed = (await stub.ResumeSession(session_api.ResumeSessionRequest(session_id=sid))).session
        assert resumed.history_message_count == 2
        assert resumed.state == session_pb2.SESSION_STATE_IDLE
        second = await stream_turn(stub, sid, "What was it?")
        assert last_of(second, "run_finished").outcome == event_pb2.RUN_OUTCOME_COMPLETED
        assert second[0].sequence > first[-1].sequence
    request = fake_model_thread.requests[-1]
    assert request.system_text == "remember things"
    assert request.messages == [
        {"role": "user", "content": [{"type": "text", "text": "Remember the code word."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "The code word is BLUE."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "What was it?", "cache_control": {"type": "ephemeral"}}],
        },
    ]


async def test_a_run_killed_mid_stream_is_marked_interrupted(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    server = server_processes.make()
    address = server.start()
    async with connect(address) as stub:
        sid = (await create_session(stub)).identity.session_id
        run = await start_hanging_run(stub, fake_model_thread, sid, "start")
        server.kill()
        run.call.cancel()
    run.reply.release()

    address = server.start()
    async with connect(address) as stub:
        session = (await stub.GetSession(session_api.GetSessionRequest(session_id=sid))).session
        assert session.state == session_pb2.SESSION_STATE_IDLE
        log = await events_after(stub, sid, 0, session.last_sequence)
        finished = last_of(log, "run_finished")
        assert finished.outcome == event_pb2.RUN_OUTCOME_FAILED
        assert finished.reason == event_pb2.RUN_REASON_INTERRUPTED
        assert log[-1].run_id == run.run_id
        # Sequences sent before the crash are never reused.
        assert log[-1].sequence > max(e.sequence for e in run.seen)
        fake_model_thread.enqueue(TextReply("back again"))
        events = await stream_turn(stub, sid, "are you there?")
        assert text_of(events) == "back again"
        assert events[0].sequence > log[-1].sequence


async def test_sigterm_shuts_down_gracefully(server_processes: ServerProcesses) -> None:
    server = server_processes.make()
    address = server.start()
    async with connect(address) as stub:
        sid = (await create_session(stub)).identity.session_id
        await stream_turn(stub, sid, "hello")
    assert server.terminate() == 0
    assert "server stopped" in server.log()
