"""Shared pieces of the file tool unit tests: a workspace with a directory outside it (to aim escapes at),
and helpers that run a tool and return its text, or the message of the ToolFailure it raised."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from general_agent_server.domain.content import TextPart
from general_agent_server.tools.runtime import LocalTool, ToolContext, ToolFailure

SECRET = "top secret outside the workspace"


@dataclass
class Layout:
    workspace: Path
    outside: Path  # a sibling directory holding secret.txt

    @property
    def context(self) -> ToolContext:
        return ToolContext(
            tenant="default", session_id="s1", run_id="run-1", call_id="call-1", workspace=self.workspace
        )

    def outside_listing(self) -> list[str]:
        return sorted(str(p.relative_to(self.outside)) for p in self.outside.rglob("*"))


def make_layout(tmp_path: Path) -> Layout:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    return Layout(workspace=workspace, outside=outside)


async def run_text(tool: LocalTool, layout: Layout, **arguments: Any) -> str:
    outcome = await tool.run(arguments, layout.context)
    assert not outcome.is_error
    parts = [p.text for p in outcome.content if isinstance(p, TextPart)]
    assert len(parts) == 1
    return parts[0]


async def run_details(tool: LocalTool, layout: Layout, **arguments: Any) -> tuple[str, dict[str, Any]]:
    outcome = await tool.run(arguments, layout.context)
    assert not outcome.is_error
    text = outcome.content[0]
    assert isinstance(text, TextPart)
    return text.text, json.loads(outcome.details_json)


async def run_failure(tool: LocalTool, layout: Layout, **arguments: Any) -> str:
    with pytest.raises(ToolFailure) as raised:
        await tool.run(arguments, layout.context)
    return raised.value.message
