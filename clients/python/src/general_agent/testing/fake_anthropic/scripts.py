"""Ready-made responders: each picks its reply from the request alone, so concurrent sessions work
(``--script NAME`` in process mode)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Final

from .recording import RecordedRequest, Responder
from .replies import Reply, ReplyLike, TextReply, ToolUseBlock

TOOL_ROUND_PATH: Final = "bench.txt"


TOOL_ROUND_TEXT: Final = "done"


def tool_round_responder(rec: RecordedRequest) -> ReplyLike:
    """One tool round, decided from the request alone (stateless, so concurrent sessions work).

    A request whose last message carries a ``tool_result`` block gets the text
    ``"done"``; any other request gets a ``tool_use`` of the built-in ``read``
    tool on ``bench.txt`` (a fresh ``toolu_`` id each time). Used by the
    tool-round-trip benchmark (``--script tool_round``).
    """
    messages = rec.messages
    content = messages[-1].get("content") if messages else None
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return TextReply(TOOL_ROUND_TEXT)
    call = ToolUseBlock(id=f"toolu_fake_{uuid.uuid4().hex[:24]}", name="read", input={"path": TOOL_ROUND_PATH})
    return Reply(blocks=(call,))


# ``--script NAME``: a responder that picks each reply from the request.
SCRIPTS: Final[Mapping[str, Responder]] = {"tool_round": tool_round_responder}
