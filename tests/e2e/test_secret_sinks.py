"""No secret the server knows reaches a sink (security/redaction.py).

Every kind of secret is planted where a turn can bring it in: the server's API key (environment), an auth
profile's key (read from a file), a session's in-memory api_key, the Firecrawl and Brave keys. A file in the
workspace holds them all (an `exec` command prints it), a web page holds them (web_fetch), the host answers a
hosted call with them, the model writes one in a command and says one in its text. Then every sink is
searched: the state directory (SQLite database, transcript and event-log JSONL), the events streamed and
replayed, what a registered hook host received, the server's log, and what the model was sent."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from general_agent.testing import FakeAnthropicThread, Reply, TextReply, ToolUseBlock
from general_agent.v1 import (
    hook_registration_pb2,
    hosted_tool_pb2,
    session_pb2,
)
from general_agent.v1 import turn_pb2 as turn_api
from tests.support.events import last_of
from tests.support.fake_web import BRAVE_PATH, FIRECRAWL_PATH, FakeWeb
from tests.support.hook_host import SDK_NATIVE_HOOKS, HookHost, binding, registration
from tests.support.rpc import Stub, connect, create_session, events_after, stream_turn
from tests.support.subprocess_server import ServerProcess, ServerProcesses

REDACTED = "[REDACTED]"
SECRETS = {
    "env": f"sk-ant-env-{secrets.token_hex(10)}",
    "profile": f"sk-ant-profile-{secrets.token_hex(10)}",
    "session": f"sk-ant-session-{secrets.token_hex(10)}",
    "firecrawl": f"fc-{secrets.token_hex(12)}",
    "brave": f"BSA{secrets.token_hex(12)}",
}
ALL = "\n".join(f"{name}: {value}" for name, value in SECRETS.items())
PAGE = f"""<html><head><title>Keys</title></head><body><article><h1>Deployment notes</h1>
<p>These are the deployment notes for the service, kept here so that the page has enough readable text for the
extractor to treat it as an article rather than as navigation or boilerplate around nothing.</p>
<p>{ALL.replace(chr(10), "; ")}</p></article></body></html>"""


@dataclass
class Env:
    server: ServerProcess
    fake: FakeAnthropicThread
    web: FakeWeb
    hooks: HookHost
    workspaces: Path


@pytest.fixture
async def env(
    tmp_path: Path, server_processes: ServerProcesses, fake_model_thread: FakeAnthropicThread
) -> AsyncIterator[Env]:
    key_file = tmp_path / "profile.key"
    key_file.write_text(SECRETS["profile"] + "\n")
    key_file.chmod(0o600)
    config = tmp_path / "config.toml"
    config.write_text(f'[auth_profiles.filed]\napi_key_file = "{key_file}"\n')
    hooks = HookHost()
    await hooks.start()
    async with FakeWeb() as web:
        extra = {
            "GENERAL_AGENT_CONFIG": str(config),
            "GENERAL_AGENT_WORKSPACE_DIR": str(tmp_path / "ws"),
            "GENERAL_AGENT_EVENT_LOG": "true",
            "GENERAL_AGENT_LOG_LEVEL": "DEBUG",
            "GENERAL_AGENT_SSRF_ALLOW_HOSTS": "127.0.0.1",
            "GENERAL_AGENT_WEB_FETCH_FIRECRAWL_BASE_URL": web.url(FIRECRAWL_PATH),
            "GENERAL_AGENT_WEB_SEARCH_BRAVE_URL": web.url(BRAVE_PATH),
            "FIRECRAWL_API_KEY": SECRETS["firecrawl"],
            "BRAVE_API_KEY": SECRETS["brave"],
        }
        server = server_processes.make(api_key=SECRETS["env"], extra=extra)
        server.start()
        try:
            yield Env(
                server=server, fake=fake_model_thread, web=web, hooks=hooks, workspaces=tmp_path / "ws" / "default"
            )
        finally:
            server.kill()
            await hooks.stop()


def found_in(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


async def run_turns(env: Env, stub: Stub) -> tuple[str, list[Any]]:
    """A CODING session with the in-memory key and a hosted tool: a round of local tools brings every secret in
    (exec, web_fetch, a command the model wrote), a round of the hosted tool brings them again, then the model
    says one. Returns the session and its events."""
    schema = '{"type": "object", "properties": {}}'
    lookup = hosted_tool_pb2.HostedToolDefinition(name="lookup", description="ask the host", input_schema_json=schema)
    session = await create_session(
        stub,
        identity=session_pb2.SessionIdentity(mode=session_pb2.SESSION_MODE_CODING),
        hosted_tools=[lookup],
        api_key=SECRETS["session"],
    )
    sid = session.identity.session_id
    (env.workspaces / sid).mkdir(parents=True)
    (env.workspaces / sid / "secrets.txt").write_text(ALL + "\n")
    env.web.page("/notes", PAGE)
    local_round = [
        ToolUseBlock(id="toolu_cat", name="exec", input={"command": "cat secrets.txt"}),
        ToolUseBlock(id="toolu_echo", name="exec", input={"command": f"echo {SECRETS['firecrawl']}"}),
        ToolUseBlock(id="toolu_fetch", name="web_fetch", input={"url": env.web.url("/notes")}),
    ]
    hosted_round = [ToolUseBlock(id="toolu_host", name="lookup", input={})]
    said = f"The key is {SECRETS['env']} and that is all."
    env.fake.enqueue(Reply(blocks=local_round), Reply(blocks=hosted_round), TextReply(said, chunks=[said]))
    events = await stream_turn(stub, sid, "collect the keys")
    request = turn_api.SubmitHostedToolResultRequest(
        session_id=sid, call_id="toolu_host", output_json=json.dumps({"echo": ALL})
    )
    events += [response.event async for response in stub.SubmitHostedToolResult(request)]
    return sid, events


async def test_no_sink_holds_a_secret(env: Env) -> None:
    async with connect(env.server.address) as stub:
        bindings = [
            binding(h, include_messages=hook_registration_pb2.HOOK_INCLUDE_MESSAGES_ALL) for h in SDK_NATIVE_HOOKS
        ]
        await stub.RegisterHooks(
            hook_registration_pb2.RegisterHooksRequest(registration=registration("audit", env.hooks.address, bindings))
        )
        sid, events = await run_turns(env, stub)
        assert last_of(events, "run_finished").outcome == 1  # RUN_OUTCOME_COMPLETED
        replayed = await events_after(stub, sid, 0, events[-1].sequence)
        await env.hooks.wait_for("agent_end", "llm_output")
    await asyncio.to_thread(env.server.terminate)  # flushes the JSONL writers

    streamed = "\n".join(json_format.MessageToJson(e) for e in [*events, *replayed])
    results = {e.tool_result.call_id: e.tool_result for e in events if e.WhichOneof("event") == "tool_result"}
    # The secrets did come in, and came out redacted.
    assert results["toolu_cat"].output[0].text.text.count(REDACTED) == len(SECRETS)
    assert results["toolu_echo"].output[0].text.text == REDACTED
    assert REDACTED in results["toolu_fetch"].output[0].text.text
    assert REDACTED in results["toolu_host"].output[0].text.text
    assert "The key is [REDACTED] and that is all." in streamed
    sinks = {
        "events": streamed,
        "hook payloads": "\n".join(json_format.MessageToJson(call.request) for call in env.hooks.calls),
        "model requests": "\n".join(json.dumps([r.system_text, r.messages]) for r in env.fake.requests),
        "server log": env.server.log(),
    }
    for path in sorted(p for p in env.server.state_dir.rglob("*") if p.is_file()):
        sinks[str(path.relative_to(env.server.state_dir))] = path.read_bytes().decode("utf-8", "replace")
    assert {"general-agent.sqlite3", f"transcripts/default/{sid}.jsonl", f"events/default/{sid}.jsonl"} <= set(sinks)
    assert REDACTED in sinks[f"events/default/{sid}.jsonl"]
    assert REDACTED in sinks["hook payloads"]
    leaks = {sink: found_in(text) for sink, text in sinks.items() if found_in(text)}
    assert leaks == {}
