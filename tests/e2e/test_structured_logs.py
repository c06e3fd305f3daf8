"""The server's JSON logs: a turn with a tool round and a remote hook yields lines of every category with
the tenant, session, run and request ids; one `system_prompt` line per run; no body (prompt, tool input or
output, assistant text, hook payload, model request) at INFO, and at DEBUG bodies only through the
redactor."""

from __future__ import annotations

import json
from typing import Any

from general_agent.testing import FakeAnthropicThread, Reply, TextBlock, TextReply, ToolUseBlock
from general_agent.v1 import hook_registration_pb2
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.hook_host import HookHost, registration
from tests.support.rpc import connect, create_session, text_input
from tests.support.subprocess_server import ServerProcess, ServerProcesses

API_KEY = "sk-ant-log-test-key-0123456789"
PLANTED = "sk-ant-planted-secret-9876543210"
# One marker per kind of body; none may appear in an INFO log.
MARKERS = {
    "system_prompt": "PROMPT-MARKER",
    "user": "USER-MARKER",
    "tool_input": "TOOL-INPUT-MARKER",
    "assistant": "ASSISTANT-MARKER",
}
RUN_CATEGORIES = {"system_prompt", "tool_call", "tool_result", "assistant", "hook", "model_request"}


def log_lines(server: ServerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


async def drive_two_turns(
    servers: ServerProcesses, fake: FakeAnthropicThread, level: str
) -> tuple[ServerProcess, list[str]]:
    """Two runs on one session, the first with a tool round, under a remote before_tool_call hook."""
    server = servers.make(
        api_key=API_KEY, extra={"GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1", "GENERAL_AGENT_LOG_LEVEL": level}
    )
    server.start()
    host = HookHost()
    await host.start()
    fake.enqueue(
        Reply(
            blocks=[
                TextBlock("looking"),
                ToolUseBlock(id="toolu_log", name="read", input={"path": f"{MARKERS['tool_input']}.txt"}),
            ]
        ),
        TextReply(f"{MARKERS['assistant']} done"),
        TextReply("second answer"),
    )
    run_ids = []
    try:
        async with connect(server.address) as stub:
            await stub.RegisterHooks(
                hook_registration_pb2.RegisterHooksRequest(
                    registration=registration("logs", host.address, ["before_tool_call"])
                )
            )
            session = await create_session(stub, system_prompt=f"{MARKERS['system_prompt']} be brief")
            for turn, text in enumerate((f"{MARKERS['user']} {PLANTED}", "again")):
                request = turn_api.StreamTurnRequest(session_id=session.identity.session_id, input=text_input(text))
                call = stub.StreamTurn(request, metadata=(("x-request-id", f"req-log-{turn}"),))
                events = [response.event async for response in call]
                assert events[-1].WhichOneof("event") == "run_finished", events[-1]
                run_ids.append(events[0].run_id)
        assert host.of("before_tool_call")
    finally:
        await host.stop()
        server.terminate()
    return server, run_ids


def run_lines(lines: list[dict[str, Any]], run_ids: list[str]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("run_id") in run_ids]


async def test_info_logs_carry_every_category_with_ids_and_no_body(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    server, run_ids = await drive_two_turns(server_processes, fake_model_thread, "INFO")
    lines = log_lines(server)
    ours = run_lines(lines, run_ids)
    assert RUN_CATEGORIES | {"system"} <= {line["category"] for line in ours}, server.log()
    for line in ours:
        assert line["tenant"] == "default", line
        assert line["session_id"], line
        assert line["request_id"] == f"req-log-{run_ids.index(line['run_id'])}", line
    for run_id in run_ids:
        prompts = [line for line in ours if line["category"] == "system_prompt" and line["run_id"] == run_id]
        assert len(prompts) == 1, prompts
        assert prompts[0]["chars"] == len(f"{MARKERS['system_prompt']} be brief")
    calls = [line for line in ours if line["category"] == "tool_call"]
    assert [(c["tool_name"], c["call_id"]) for c in calls] == [("read", "toolu_log")]
    hooks = [line for line in ours if line["category"] == "hook"]
    assert {(h["hook"], h["plugin_id"], h["status"]) for h in hooks} == {("before_tool_call", "logs", "ok")}
    models = [line for line in ours if line["category"] == "model_request"]
    assert len(models) == 3
    assert all(m["status"] == "ok" and m["provider_request_id"] and m["duration_ms"] >= 0 for m in models)
    assert not [line for line in lines if "body" in line or line["level"] == "DEBUG"]
    text = server.log()
    for marker in MARKERS.values():
        assert marker not in text, marker
    assert PLANTED not in text
    assert API_KEY not in text


async def test_debug_logs_add_bodies_through_the_redactor(
    server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> None:
    server, run_ids = await drive_two_turns(server_processes, fake_model_thread, "DEBUG")
    ours = run_lines(log_lines(server), run_ids)
    assert RUN_CATEGORIES | {"system", "provider_debug"} <= {line["category"] for line in ours}
    bodies = {line["category"]: line["body"] for line in ours if "body" in line}
    assert MARKERS["system_prompt"] in bodies["system_prompt"]
    assert MARKERS["tool_input"] in bodies["tool_call"]
    assert MARKERS["tool_input"] in bodies["tool_result"]  # the read error names the path
    assert any(MARKERS["assistant"] in line["body"] for line in ours if line["category"] == "assistant")
    assert MARKERS["tool_input"] in bodies["hook"]  # the before_tool_call event carries the params
    assert MARKERS["user"] in next(line["body"] for line in ours if line["category"] == "provider_debug")
    for run_id in run_ids:
        assert len([line for line in ours if line["category"] == "system_prompt" and line["run_id"] == run_id]) == 1
    text = server.log()
    assert PLANTED not in text
    assert "[REDACTED]" in next(line["body"] for line in ours if line["category"] == "provider_debug")
    assert API_KEY not in text
