"""In-process plugins from a real entry point (docs/hooks.md): a distribution on sys.path declares the plugin in
the `general_agent.plugins` group; `plugin_mode` and `enabled_plugin_ids` decide whether it loads; its
handlers merge with remote ones by priority."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from general_agent.testing import FakeAnthropic, Reply, TextReply, ToolUseBlock
from general_agent.v1 import hook_pb2
from tests.conftest import ServerFactory
from tests.support.events import kinds, last_of
from tests.support.hook_agent import Agent, open_agent
from tests.support.hook_host import binding, returning
from tests.support.rpc import create_session, stream_turn

PLUGIN_ID = "ga-test-guard"
MODULE = "ga_test_guard_plugin"

PLUGIN_SOURCE = '''
"""Blocks every tool call and puts a marker before the system prompt."""


class Guard:
    def __init__(self, plugin_id):
        self.plugin_id = plugin_id

    def register(self, hooks):
        @hooks.on("before_tool_call")
        async def guard(event, context):
            return {"block": True, "blockReason": f"{event['toolName']} blocked by plugin {context['pluginId']}"}

        @hooks.on("before_prompt_build", priority=5)
        async def mark(event, context):
            return {"prependSystemContext": "[plugin p5]"}
'''


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module and its dist-info on sys.path: importlib.metadata finds the entry point like an installed one."""
    site = tmp_path / "site"
    dist_info = site / "ga_test_guard-0.0.0.dist-info"
    dist_info.mkdir(parents=True)
    (site / f"{MODULE}.py").write_text(textwrap.dedent(PLUGIN_SOURCE))
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: ga-test-guard\nVersion: 0.0.0\n")
    (dist_info / "entry_points.txt").write_text(f"[general_agent.plugins]\n{PLUGIN_ID} = {MODULE}:Guard\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)  # each test imports its own copy


def plugin_env(mode: str, enabled: str) -> dict[str, str]:
    return {"GENERAL_AGENT_PLUGIN_MODE": mode, "GENERAL_AGENT_ENABLED_PLUGIN_IDS": enabled}


async def read_a_file(agent: Agent, fake_model: FakeAnthropic) -> list[object]:
    session = await create_session(agent.stub)
    sid = session.identity.session_id
    (agent.workspace(sid) / "notes.txt").write_text("hello\n")
    fake_model.enqueue(
        Reply(blocks=[ToolUseBlock(id="t1", name="read", input={"path": "notes.txt"})]), TextReply("done")
    )
    return await stream_turn(agent.stub, sid, "read my notes")


@pytest.mark.parametrize(
    ("mode", "enabled"),
    [
        ("ALLOWLISTED", PLUGIN_ID),
        ("ALLOWLISTED", f"  {PLUGIN_ID.upper()} , not-installed"),  # ids are trimmed and lower-cased
        ("FULL_EMBEDDED", ""),
    ],
)
@pytest.mark.usefixtures("installed_plugin")
async def test_a_loaded_plugin_blocks_tool_calls(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic, mode: str, enabled: str
) -> None:
    async with open_agent(server_factory, tmp_path, plugin_env(mode, enabled)) as agent:
        events = await read_a_file(agent, fake_model)
    assert last_of(events, "tool_error").error == f"read blocked by plugin {PLUGIN_ID}"


@pytest.mark.parametrize(("mode", "enabled"), [("DISABLED", PLUGIN_ID), ("ALLOWLISTED", ""), ("ALLOWLISTED", "other")])
@pytest.mark.usefixtures("installed_plugin")
async def test_a_plugin_the_mode_does_not_allow_is_not_loaded(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic, mode: str, enabled: str
) -> None:
    async with open_agent(server_factory, tmp_path, plugin_env(mode, enabled)) as agent:
        events = await read_a_file(agent, fake_model)
    assert "tool_result" in kinds(events)
    assert "tool_error" not in kinds(events)


@pytest.mark.usefixtures("installed_plugin")
async def test_plugin_and_remote_handlers_merge_by_priority(
    server_factory: ServerFactory, tmp_path: Path, fake_model: FakeAnthropic
) -> None:
    async with open_agent(server_factory, tmp_path, plugin_env("ALLOWLISTED", PLUGIN_ID)) as agent:
        for priority, marker in ((10, "[remote p10]"), (-1, "[remote p-1]")):
            answer = returning(hook_pb2.BeforePromptBuildResult(prepend_system_context=marker))
            host = await agent.host({"before_prompt_build": answer})
            await agent.register(f"remote{priority}", host.address, [binding("before_prompt_build", priority=priority)])
        session = await create_session(agent.stub, system_prompt="Base.")
        fake_model.enqueue(TextReply("ok"))
        await stream_turn(agent.stub, session.identity.session_id, "hi")
    # prependSystemContext is concatenated highest priority first, whoever serves the handler.
    assert fake_model.requests[-1].system_text == "[remote p10]\n\n[plugin p5]\n\n[remote p-1]\n\nBase."
