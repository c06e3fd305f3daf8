"""Unit tests of the pure pieces of the core: request building, credentials, paging, validation,
redaction, the model table and subscriber buffers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from general_agent_server.domain.content import ImagePart, TextPart
from general_agent_server.domain.errors import ErrorCode, ServiceError
from general_agent_server.domain.events import AssistantDelta, ReasoningEnd, SequencedEvent
from general_agent_server.domain.history import HistoryMessage
from general_agent_server.domain.session import SessionConfig, ThinkingConfig, ThinkingMode
from general_agent_server.domain.validation import check_config, check_session_id, check_turn_input
from general_agent_server.model.catalog import ThinkingKind, capabilities, provider_model_id
from general_agent_server.model.credentials import AuthProfile, CredentialResolver
from general_agent_server.model.request_builder import build_request, thinking_param
from general_agent_server.security.redaction import scrub
from general_agent_server.sessions.paging import decode_token, encode_token
from general_agent_server.sessions.subscribers import Subscriber

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


def test_model_refs_and_capabilities() -> None:
    assert provider_model_id("anthropic/claude-opus-4-6") == "claude-opus-4-6"
    assert provider_model_id("claude-opus-4-6") == "claude-opus-4-6"
    assert capabilities("anthropic/claude-opus-4-6").thinking is ThinkingKind.ADAPTIVE
    assert capabilities("claude-opus-4.6").max_output_tokens == 128_000
    assert capabilities("claude-opus-4-20250514").family == "opus-4"
    assert capabilities("claude-3-5-haiku-latest").thinking is ThinkingKind.NONE
    unknown = capabilities("my-proxy-model")
    assert (unknown.context_window, unknown.thinking) == (200_000, ThinkingKind.NONE)


def test_thinking_defaults_and_budget_clamp() -> None:
    config = SessionConfig()
    assert thinking_param(config, "claude-sonnet-4-6", 64_000) == {"type": "adaptive"}
    assert thinking_param(config, "claude-sonnet-4-5", 64_000) is None
    off = SessionConfig(thinking=ThinkingConfig(mode=ThinkingMode.OFF))
    assert thinking_param(off, "claude-sonnet-4-6", 64_000) is None
    budget = SessionConfig(thinking=ThinkingConfig(mode=ThinkingMode.BUDGET, budget_tokens=50_000))
    assert thinking_param(budget, "claude-sonnet-4-5", 8_000) == {"type": "enabled", "budget_tokens": 7_999}


def test_request_merges_roles_strips_foreign_thinking_and_never_mutates_history() -> None:
    history = [
        HistoryMessage(role="user", content=({"type": "text", "text": "a"},)),
        HistoryMessage(
            role="assistant",
            content=({"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "b"}),
            model_ref="claude-sonnet-4-6",
        ),
        HistoryMessage(role="user", content=({"type": "text", "text": "c"},)),
        HistoryMessage(role="user", content=({"type": "text", "text": "d"},)),
    ]
    request = build_request(
        config=SessionConfig(max_tokens=100),
        model_ref="anthropic/claude-opus-4-6",
        system_prompt="sys",
        history=history,
        tools=[],
        max_tokens_cap=64_000,
    )
    assert request.model == "claude-opus-4-6"
    assert request.max_tokens == 100
    assert request.messages == [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "c"},
                {"type": "text", "text": "d", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    assert "cache_control" not in history[3].content[0]
    assert history[2].content == ({"type": "text", "text": "c"},)


def test_credentials_resolution_order_and_isolation() -> None:
    server_default = AuthProfile(profile_id="default", api_key="server-key", base_url="http://a")
    team = AuthProfile(profile_id="team", api_key="team-key", base_url="http://b", allowed_tenants=frozenset({"t1"}))
    empty = AuthProfile(profile_id="empty")
    resolver = CredentialResolver(
        {"team": team, "empty": empty}, tenant_defaults={"t1": "team"}, server_default=server_default
    )
    assert resolver.resolve(tenant="t1", session_profile_id="", memory_api_key="").api_key == "team-key"  # type: ignore[union-attr]
    assert resolver.resolve(tenant="t2", session_profile_id="", memory_api_key="").api_key == "server-key"  # type: ignore[union-attr]
    memory = resolver.resolve(tenant="t2", session_profile_id="", memory_api_key="mem")
    assert memory is not None
    assert (memory.api_key, memory.base_url) == ("mem", "http://a")
    # A named profile never falls back to another account.
    assert resolver.resolve(tenant="t1", session_profile_id="empty", memory_api_key="") is None
    assert resolver.resolve(tenant="t2", session_profile_id="team", memory_api_key="") is None
    restricted = CredentialResolver({}, tenant_defaults={}, server_default=AuthProfile(profile_id="d", api_key=""))
    assert restricted.resolve(tenant="x", session_profile_id="", memory_api_key="") is None
    assert "team-key" not in repr(team)


def test_page_tokens_are_bound_to_filters() -> None:
    token = encode_token({"e": 5}, "digest-a")
    assert decode_token(token, "digest-a") == {"e": 5}
    with pytest.raises(ServiceError) as other:
        decode_token(token, "digest-b")
    assert other.value.reason == "INVALID_PAGE_TOKEN"
    with pytest.raises(ServiceError):
        decode_token("%%%", "digest-a")


def test_validation_names_fields() -> None:
    for bad in ("", "../x", ".hidden", "a/b", "x" * 129):
        with pytest.raises(ServiceError) as error:
            check_session_id(bad)
        assert error.value.field_violations[0].field == "session_id"
    check_session_id("chat-1:user@example.com")
    with pytest.raises(ServiceError) as error:
        check_config(SessionConfig(labels={"Bad Key": "v"}), known_profile=True)
    assert error.value.field_violations[0].field == "session.labels"
    with pytest.raises(ServiceError) as error:
        check_config(SessionConfig(mcp_servers={"x": {}}, disabled_mcp_servers=("y",)), known_profile=True)
    assert error.value.field_violations[0].field == "session.disabled_mcp_servers"


def test_turn_input_limits() -> None:
    check_turn_input(
        (TextPart(text="hi"), ImagePart(mime_type="image/png", data=PNG)),
        field_path="input",
        max_image_bytes=1000,
        max_message_bytes=1000,
    )
    with pytest.raises(ServiceError) as error:
        check_turn_input(
            (ImagePart(mime_type="image/png", data=PNG * 100),),
            field_path="input",
            max_image_bytes=1000,
            max_message_bytes=10_000,
        )
    assert (error.value.code, error.value.reason) == (ErrorCode.RESOURCE_EXHAUSTED, "RESOURCE_LIMIT")
    with pytest.raises(ServiceError) as error:
        check_turn_input((TextPart(text="x" * 2000),), field_path="input", max_image_bytes=1, max_message_bytes=1000)
    assert error.value.metadata["limit"] == "max_message_bytes"
    with pytest.raises(ServiceError) as error:
        check_turn_input(
            (ImagePart(mime_type="image/jpeg", data=PNG),),
            field_path="input",
            max_image_bytes=1000,
            max_message_bytes=1000,
        )
    assert error.value.field_violations[0].field == "input[0].image.data"


def test_scrub_removes_known_and_key_shaped_secrets() -> None:
    text = "failed with key sk-ant-api03-abcdefghijklmnop and Bearer abc.def.ghijkl and my-secret-value"
    cleaned = scrub(text, ["my-secret-value"])
    assert "sk-ant-api03" not in cleaned
    assert "abc.def.ghijkl" not in cleaned
    assert "my-secret-value" not in cleaned
    assert cleaned.count("[REDACTED]") == 3


def _delta(sequence: int, text: str, run_id: str = "r") -> SequencedEvent:
    return SequencedEvent(
        sequence=sequence, session_id="s", run_id=run_id, create_time=datetime.now(UTC), body=AssistantDelta(text=text)
    )


async def test_subscriber_delivers_events_exactly_as_numbered_even_while_lagging() -> None:
    """A lagging subscriber never merges deltas: live and replayed streams carry the same events."""
    subscriber = Subscriber(max_buffered=10)
    offered = [_delta(1, "a"), _delta(2, "b"), _delta(3, "c"), _delta(4, "d", run_id="other")]
    for event in offered:
        subscriber.offer(event)
    received = [await subscriber.get() for _ in offered]
    assert received == offered


async def test_subscriber_overflow_fails_with_slow_consumer() -> None:
    subscriber = Subscriber(max_buffered=2)
    for sequence in range(1, 5):
        subscriber.offer(
            SequencedEvent(
                sequence=sequence, session_id="s", run_id="r", create_time=datetime.now(UTC), body=ReasoningEnd()
            )
        )
    with pytest.raises(ServiceError) as error:
        await subscriber.get()
    assert error.value.reason == "SLOW_CONSUMER"


async def test_subscriber_keeps_order_and_bounds_while_a_consumer_trails_by_a_few() -> None:
    # The consumer never drains the buffer fully, so its consumed front is dropped in place as it grows.
    subscriber = Subscriber(max_buffered=8)
    received: list[int] = []
    for sequence in range(1, 1001):
        subscriber.offer(_delta(sequence, "x"))
        if sequence > 3:
            event = await subscriber.get()
            assert event is not None
            received.append(event.sequence)
    assert received == list(range(1, 998))
    assert len(getattr(subscriber, "_items")) < 200  # noqa: B009 (the buffer's storage, not its content)
    # A waiting consumer is woken by the next offer.
    drained = [await subscriber.get() for _ in range(3)]
    waiting = asyncio.ensure_future(subscriber.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    subscriber.offer(_delta(1001, "y"))
    assert [e.sequence for e in drained if e] + [(await waiting).sequence] == [998, 999, 1000, 1001]  # type: ignore[union-attr]


async def test_subscriber_overflow_names_the_last_delivered_sequence() -> None:
    subscriber = Subscriber(max_buffered=3)
    for sequence in range(1, 4):
        subscriber.offer(_delta(sequence, "x"))
    assert (await subscriber.get()).sequence == 1  # type: ignore[union-attr]
    for sequence in range(4, 6):
        subscriber.offer(_delta(sequence, "x"))
    with pytest.raises(ServiceError) as error:
        await subscriber.get()
    assert error.value.metadata["last_delivered_sequence"] == "1"


async def test_subscriber_close_drains_then_ends() -> None:
    subscriber = Subscriber(max_buffered=5)
    subscriber.offer(_delta(1, "x"))
    subscriber.close()
    assert await subscriber.get() is not None
    assert await subscriber.get() is None
