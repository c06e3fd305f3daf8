"""Shared pieces of the web tool unit tests (web_fetch, web_search): the tool context, the payload a tool answers
(checked to be what the model reads), and the content between the external-content markers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from general_agent_server.tools.runtime import ToolContext, ToolOutcome


def context(tmp_path: Path) -> ToolContext:
    return ToolContext(tenant="default", session_id="s1", run_id="r1", call_id="c1", workspace=tmp_path)


def payload_of(outcome: ToolOutcome) -> dict[str, Any]:
    assert not outcome.is_error
    details: dict[str, Any] = json.loads(outcome.details_json)
    # The model reads the same payload, as pretty JSON.
    assert outcome.error_text == json.dumps(details, indent=2, ensure_ascii=False)
    return details


def untrusted_content(text: str, source: str, *, whole: bool = False) -> str:
    """The content between the markers that wrap external content from `source` ("Web Fetch", "Web Search"),
    at the end of `text`; `whole`: the wrapped content is all of `text`."""
    pattern = (
        r'<<<EXTERNAL_UNTRUSTED_CONTENT id="([0-9a-f]{16})">>>\nSource: ' + re.escape(source) + r"\n---\n(.*)\n"
        r'<<<END_EXTERNAL_UNTRUSTED_CONTENT id="\1">>>'
    )
    match = re.fullmatch(pattern, text, re.DOTALL) if whole else re.search(pattern + "$", text, re.DOTALL)
    assert match is not None, text
    return match.group(2)
