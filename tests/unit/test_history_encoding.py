"""A session's kept history encoding (model/history_encoding.py) never changes what a request says.

Hypothesis drives one session through a sequence of calls whose histories grow as a session's do (turns, tool
rounds, a failed call's second user message in a row, an empty message), are replaced (compaction, reset), switch
model family (thinking blocks kept only for the family that wrote them) or prepend hook context to the run's first
message. At every call the request built with the session's encoding must have the same messages as the one built
without it, its body must be the encoding of those messages, and the kept prefix must cover what the earlier calls
closed (so later calls pay only for what the history gained)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionConfig
from general_agent_server.model.history_encoding import HistoryEncoding
from general_agent_server.model.port import ModelRequest
from general_agent_server.model.request_builder import build_request
from general_agent_server.model.wire_body import BodyEncoder, dumps

HAIKU = "claude-haiku-4-5"
SONNET = "claude-sonnet-4-6"
_ids = itertools.count()


def _user(text: str, run_id: str) -> HistoryMessage:
    return HistoryMessage(role="user", content=({"type": "text", "text": text},), run_id=run_id)


def _assistant(model_ref: str, run_id: str) -> HistoryMessage:
    n = next(_ids)
    return HistoryMessage(
        role="assistant",
        content=(
            {"type": "thinking", "thinking": f"thought {n}", "signature": "c2ln"},
            {"type": "text", "text": f"answer {n} ✓"},
        ),
        run_id=run_id,
        model_ref=model_ref,
    )


def _tool_round(model_ref: str, run_id: str) -> list[HistoryMessage]:
    call_id = f"toolu_{next(_ids)}"
    call = HistoryMessage(
        role="assistant",
        content=({"type": "tool_use", "id": call_id, "name": "glob", "input": {"pattern": "*"}},),
        run_id=run_id,
        model_ref=model_ref,
    )
    result = HistoryMessage(
        role="user", content=({"type": "tool_result", "tool_use_id": call_id, "content": "a.txt"},), run_id=run_id
    )
    return [call, result]


STEPS = st.sampled_from(["turn", "tool_round", "failed_call", "empty", "compact", "reset", "switch_model", "same"])


def _request(history: list[HistoryMessage], model_ref: str, prepend: str, run_id: str, **kw: Any) -> ModelRequest:
    return build_request(
        config=SessionConfig(),
        model_ref=model_ref,
        system_prompt="Be brief.",
        history=history,
        tools=[],
        max_tokens_cap=8192,
        prepend_context=prepend,
        run_id=run_id,
        **kw,
    )


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(STEPS, st.booleans()), min_size=1, max_size=25))
def test_requests_with_the_kept_encoding_equal_those_built_without_it(steps: list[tuple[str, bool]]) -> None:
    encoding, encoder = HistoryEncoding(), BodyEncoder()
    history: list[HistoryMessage] = []
    model_ref = HAIKU
    for number, (step, prepend_context) in enumerate(steps):
        run_id = f"run-{number}"
        if step == "turn":
            history = [*history, _assistant(model_ref, f"run-{number - 1}"), _user(f"q{number}", run_id)]
        elif step == "tool_round":
            history = [*history, _user(f"q{number}", run_id), *_tool_round(model_ref, run_id)]
        elif step == "failed_call":
            history = [*history, _user(f"q{number}", run_id), _user(f"again {number}", run_id)]
        elif step == "empty":
            history = [*history, HistoryMessage(role="assistant", content=(), run_id=run_id), _user("e", run_id)]
        elif step == "compact":
            history = [_user("summary of the conversation", run_id), *history[-2:]]
        elif step == "reset":
            history = [_user(f"fresh {number}", run_id)]
        elif step == "switch_model":
            model_ref = SONNET if model_ref == HAIKU else HAIKU
            history = [*history, _user(f"q{number}", run_id)]
        prepend = "Recalled: the user likes tea." if prepend_context else ""
        kept = _request(history, model_ref, prepend, run_id, encoding=encoding)
        plain = _request(history, model_ref, prepend, run_id)
        assert kept.messages == plain.messages
        assert encoder.body(kept) == encoder.body(plain) == _sdk_body(plain)
        prefix = kept.encoded_prefix
        if prefix is not None:
            assert prefix.json == b",".join(dumps(m) for m in plain.messages[: prefix.count])
            # The breakpoint copy is never kept: the kept messages carry no cache_control.
            assert b"cache_control" not in prefix.json


def test_a_long_session_encodes_each_message_once() -> None:
    """Turn after turn, the prefix grows by the turn's closed messages: earlier ones are not built again."""
    encoding = HistoryEncoding()
    history = [_user("q0", "run-0")]
    kept: list[dict[str, Any]] = []
    prefix_json = b""
    for turn in range(1, 50):
        history = [*history, _assistant(HAIKU, f"run-{turn - 1}"), _user(f"q{turn}", f"run-{turn}")]
        request = _request(history, HAIKU, "", f"run-{turn}", encoding=encoding)
        assert request.encoded_prefix is not None
        assert request.encoded_prefix.count == len(history) - 2  # all but the last assistant and user message
        # The kept API messages are the same objects as the previous call's: nothing was built again.
        assert all(a is b for a, b in zip(kept, request.messages, strict=False))
        kept = request.messages[: request.encoded_prefix.count]
        prefix_json = request.encoded_prefix.json
    assert encoding.kept_bytes == len(prefix_json)


def _sdk_body(request: ModelRequest) -> bytes:
    body = {
        "max_tokens": request.max_tokens,
        "messages": request.messages,
        "model": request.model,
        "stream": True,
        "system": request.system,
    }
    if request.thinking is not None:
        body["thinking"] = request.thinking
    return dumps(body)
