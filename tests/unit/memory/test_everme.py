"""The EverMe backend against the fake gateway (tests/support/fake_everme.py): the envelope, the requestId
header, retry gating (GET once more, POST never), typed timeouts, batching at 500 with boundary preference,
the turn and flush/sync flags, the device route failing closed, and the env file's precedence."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from general_agent_server.memory.everme.backend import EverMeBackend
from general_agent_server.memory.everme.batching import TOOL, TURN, boundaries, split
from general_agent_server.memory.everme.client import EverMeClient
from general_agent_server.memory.everme.config import (
    EverMeConfig,
    load_config,
    merged_environment,
    normalise_base,
    routed_base,
)
from general_agent_server.memory.types import FailureKind, MemoryFailure, MemoryMessage, Scope, ToolCall
from tests.support.fake_everme import DROP, HTML_502, NO_STATUS, STALL, STALL_BODY, FakeEverMe, envelope_error

TOKEN = "evt_" + "T0kenValue" * 4
SCOPE = Scope("default", "alice", "", "conversation-1")


@pytest.fixture
async def gateway() -> AsyncIterator[FakeEverMe]:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as fake:
        yield fake


def config(fake: FakeEverMe, **changes: object) -> EverMeConfig:
    values: dict[str, object] = {"api_base": normalise_base(fake.base_url), "token": TOKEN, "agent_id": "agent-1"}
    values.update(changes)
    return EverMeConfig(**values)  # type: ignore[arg-type]


def message(
    role: str, text: str = "x", *, calls: tuple[str, ...] = (), result_of: str = "", done: bool | None = None
) -> MemoryMessage:
    return MemoryMessage(
        role=role,  # type: ignore[arg-type]
        content=text,
        timestamp_ms=1,
        native_id=text,
        tool_calls=tuple(ToolCall(id=c, name="read", arguments="{}") for c in calls),
        tool_call_id=result_of,
        turn_complete=done,
    )


async def test_envelope_success_headers_and_request_id(gateway: FakeEverMe) -> None:
    client = EverMeClient(config(gateway))
    reply = await client.call("POST", "/mem/search", {"query": "teal", "topK": 3})
    await client.aclose()
    (request,) = gateway.calls("/mem/search")
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Content-Type"] == "application/json"
    assert "agentId=agent-1" in request.headers["User-Agent"]
    assert len(request.headers["requestId"]) == 36
    assert reply.request_id == request.headers["requestId"]
    assert request.json() == {"query": "teal", "topK": 3}


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        (envelope_error(30001, "token expired", http=401), FailureKind.AUTH),
        (envelope_error(30104, "not an auth error"), FailureKind.UPSTREAM),
        (envelope_error(40001, "content too long", http=422), FailureKind.INVALID),
        (envelope_error(50000, "backend down", http=500), FailureKind.UPSTREAM),
        (HTML_502, FailureKind.UPSTREAM),
    ],
)
async def test_envelope_failures_are_typed_and_carry_the_request_id(
    gateway: FakeEverMe, mode: object, kind: FailureKind
) -> None:
    gateway.fail("/mem/search", mode)  # type: ignore[arg-type]
    client = EverMeClient(config(gateway))
    with pytest.raises(MemoryFailure) as caught:
        await client.call("POST", "/mem/search", {"query": "q"})
    await client.aclose()
    assert caught.value.kind is kind
    assert caught.value.request_id == gateway.calls("/mem/search")[0].headers["requestId"]
    assert not caught.value.ambiguous
    if mode is HTML_502:
        assert "HTTP 502" in caught.value.message


async def test_a_missing_status_is_a_failure(gateway: FakeEverMe) -> None:
    gateway.fail("/mem/search", envelope_error(0), NO_STATUS)
    client = EverMeClient(config(gateway))
    assert (await client.call("POST", "/mem/search", {})).result is None  # status 0 without a result: success
    with pytest.raises(MemoryFailure) as caught:
        await client.call("POST", "/mem/search", {})
    await client.aclose()
    assert caught.value.kind is FailureKind.UPSTREAM


async def test_get_is_retried_once_after_a_dropped_connection(gateway: FakeEverMe) -> None:
    gateway.fail("/mem/health", DROP)
    client = EverMeClient(config(gateway))
    reply = await client.call("GET", "/mem/health")
    await client.aclose()
    calls = gateway.calls("/mem/health")
    assert len(calls) == 2
    assert calls[0].headers["requestId"] == calls[1].headers["requestId"] == reply.request_id


async def test_post_is_never_retried(gateway: FakeEverMe) -> None:
    gateway.fail("/mem/agent-memory", DROP)
    client = EverMeClient(config(gateway))
    with pytest.raises(MemoryFailure) as caught:
        await client.call("POST", "/mem/agent-memory", {"messages": []})
    await client.aclose()
    assert len(gateway.calls("/mem/agent-memory")) == 1
    assert caught.value.kind is FailureKind.NETWORK
    assert caught.value.ambiguous  # the body was sent: the gateway may have applied it


@pytest.mark.parametrize("mode", [STALL, STALL_BODY])
async def test_a_stall_is_a_typed_timeout_and_never_retried(gateway: FakeEverMe, mode: object) -> None:
    gateway.fail("/mem/health", mode)  # type: ignore[arg-type]
    client = EverMeClient(config(gateway), timeout=0.3)
    with pytest.raises(MemoryFailure) as caught:
        await client.call("GET", "/mem/health")
    await client.aclose()
    assert caught.value.kind is FailureKind.TIMEOUT
    assert len(gateway.calls("/mem/health")) == 1


def test_boundaries_prefer_turns_then_tool_groups() -> None:
    messages = [
        message("user", "u1"),
        message("assistant", "a1", calls=("c1",)),
        message("tool", "r1", result_of="c1"),
        message("assistant", "a2"),
        message("user", "u2"),
        message("assistant", "a3", done=False),
        message("user", "u3"),
    ]
    strength = boundaries(messages)
    assert strength[2] == TOOL  # after the complete call/result group
    assert strength[3] == TURN  # the assistant answer followed by the user
    assert strength[5] == 0  # turn_complete=False never closes a turn
    assert strength[0] == 0


def test_split_at_500_prefers_a_turn_then_a_tool_group_then_the_hard_limit() -> None:
    turns = [message("user", f"u{i}") if i % 2 == 0 else message("assistant", f"a{i}") for i in range(600)]
    assert split(turns) == [(0, 500), (500, 600)]  # message 499 is an answer followed by a user: a turn
    tools = [message("user", "u")] + [
        m
        for i in range(300)
        for m in (message("assistant", f"a{i}", calls=(f"c{i}",)), message("tool", f"r{i}", result_of=f"c{i}"))
    ]
    assert split(tools)[0] == (0, 499)  # the last complete tool group inside the window
    long = [message("user", "u")] + [message("assistant", f"a{i}", calls=(f"c{i}",)) for i in range(700)]
    ranges = split(long)
    assert ranges == [(0, 500), (500, 701)]
    assert sum(end - start for start, end in ranges) == 701


async def test_a_split_upload_flags_and_order(gateway: FakeEverMe) -> None:
    backend = EverMeBackend(config(gateway))
    messages = [message("user", f"u{i}") if i % 2 == 0 else message("assistant", f"a{i}") for i in range(1200)]
    result = await backend.write(SCOPE, messages, flush=True, turns=1)
    await backend.aclose()
    bodies = [r.json() for r in gateway.calls("/mem/agent-memory")]
    assert [len(b["messages"]) for b in bodies] == [500, 500, 200]
    assert [b["flush"] for b in bodies] == [False, False, True]
    assert [b.get("sync") for b in bodies] == [True, True, None]
    assert [b["turns"] for b in bodies] == [0, 0, 1]
    assert {b["channel"] for b in bodies} == {"hook"}
    assert [m["content"] for b in bodies for m in b["messages"]] == [m.content for m in messages]
    assert len(result.request_ids) == 3


async def test_no_flush_no_sync_and_turn_complete_on_the_wire(gateway: FakeEverMe) -> None:
    backend = EverMeBackend(config(gateway))
    await backend.write(SCOPE, [message("user", "u"), message("assistant", "a", done=True)], flush=False, turns=1)
    await backend.aclose()
    (body,) = [r.json() for r in gateway.calls("/mem/agent-memory")]
    assert body["flush"] is False
    assert "sync" not in body
    assert body["conversationId"] == "conversation-1"
    assert body["messages"][1]["turnComplete"] is True
    assert "turnComplete" not in body["messages"][0]


async def test_a_failed_batch_stops_the_upload_and_resumes_there(gateway: FakeEverMe) -> None:
    backend = EverMeBackend(config(gateway))
    messages = [message("user", f"u{i}") if i % 2 == 0 else message("assistant", f"a{i}") for i in range(1200)]
    gateway.fail("/mem/agent-memory", envelope_error(0), envelope_error(50000, "busy", http=503))
    with pytest.raises(MemoryFailure) as caught:
        await backend.write(SCOPE, messages, flush=True, turns=1)
    assert caught.value.sent_batches == 1
    assert len(gateway.calls("/mem/agent-memory")) == 2  # nothing after the failed batch, no flush
    await backend.write(SCOPE, messages, flush=True, turns=1, start_batch=caught.value.sent_batches)
    await backend.aclose()
    bodies = [r.json() for r in gateway.calls("/mem/agent-memory")][2:]
    assert [b["messages"][0]["content"] for b in bodies] == ["u500", "u1000"]


async def test_writes_need_an_agent_token_and_id(gateway: FakeEverMe) -> None:
    backend = EverMeBackend(config(gateway, token="emk_" + "readonly" * 5, agent_id=""))
    with pytest.raises(MemoryFailure) as caught:
        await backend.write(SCOPE, [message("user", "u")], flush=False, turns=1)
    await backend.aclose()
    assert caught.value.kind is FailureKind.CONFIG
    assert gateway.calls("/mem/agent-memory") == []


async def test_search_and_context_map_the_result(gateway: FakeEverMe) -> None:
    gateway.profile = {"explicit_info": [{"category": "food", "description": "Likes mango"}], "implicit_traits": []}
    backend = EverMeBackend(config(gateway))
    await backend.write(
        SCOPE, [message("user", "I like mango lassi"), message("assistant", "Noted")], flush=False, turns=1
    )
    hits = await backend.search(SCOPE, "mango", top_k=5)
    assert hits[0].text == "user: I like mango lassi"
    assert await backend.get(SCOPE, hits[0].id) == hits[0]
    assert await backend.get(Scope("other", "bob", "", "c"), hits[0].id) is None
    assert await backend.context(SCOPE) == "Likes mango"
    await backend.aclose()


async def test_the_device_route_sends_every_request_to_its_loopback_gateway(
    gateway: FakeEverMe, tmp_path: Path
) -> None:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as cloud:
        route = tmp_path / "route.json"
        route.write_text(json.dumps({"mode": "local", "gateway": gateway.base_url}))
        client = EverMeClient(config(cloud, route_file=route))
        await client.call("POST", "/mem/search", {"query": "q"})
        assert len(gateway.calls("/mem/search")) == 1
        route.write_text(json.dumps({"mode": "cloud"}))  # read per request: a switch needs no restart
        await client.call("POST", "/mem/search", {"query": "q"})
        await client.aclose()
        assert len(cloud.calls("/mem/search")) == 1


@pytest.mark.parametrize(
    "content", ["{not json", json.dumps({"mode": "local", "gateway": "http://203.0.113.7:18790"}), "[]"]
)
async def test_an_unusable_route_fails_closed_to_the_default_loopback_gateway(
    gateway: FakeEverMe, tmp_path: Path, content: str
) -> None:
    async with FakeEverMe(tokens=frozenset({TOKEN})) as cloud:
        route = tmp_path / "route.json"
        route.write_text(content)
        client = EverMeClient(config(cloud, route_file=route, device_gateway=gateway.base_url))
        await client.call("POST", "/mem/search", {"query": "q"})
        await client.aclose()
        assert cloud.requests == []
        assert len(gateway.calls("/mem/search")) == 1


def test_an_unreadable_route_is_the_default_gateway(tmp_path: Path) -> None:
    route = tmp_path / "route.json"
    route.mkdir()  # exists, cannot be read as a file
    chosen = routed_base(EverMeConfig(api_base="https://cloud.example/api/v1", route_file=route))
    assert chosen == "http://127.0.0.1:18790/api/v1"
    assert routed_base(EverMeConfig(api_base="https://cloud.example/api/v1", route_file=tmp_path / "none.json")) == (
        "https://cloud.example/api/v1"
    )


def test_the_env_file_never_overrides_the_shell_except_the_token_and_id(tmp_path: Path) -> None:
    env_file = tmp_path / "everme.env"
    env_file.write_text(
        "# rotated by the installer\n"
        "EVERME_API_BASE=https://file.example\n"
        "export EVERME_AGENT_TOKEN='evt_fromfile_0123456789abcdefghijklmnop'\n"
        'EVERME_AGENT_ID="agent-file"\n'
        "EVERME_FLUSH_EVERY_TURNS=3\n"
    )
    shell = {
        "EVERME_API_BASE": "https://shell.example/",
        "EVERME_AGENT_TOKEN": "evt_stale_shell_0123456789abcdefghijkl",
        "EVERME_AGENT_ID": "agent-shell",
    }
    merged = merged_environment(shell, env_file)
    assert merged["EVERME_API_BASE"] == "https://shell.example/"
    assert merged["EVERME_AGENT_TOKEN"] == "evt_fromfile_0123456789abcdefghijklmnop"
    assert merged["EVERME_AGENT_ID"] == "agent-file"
    assert merged["EVERME_FLUSH_EVERY_TURNS"] == "3"  # the shell did not set it
    loaded = load_config(shell, env_file)
    assert loaded.api_base == "https://shell.example/api/v1"
    assert loaded.can_write
    assert normalise_base("https://x.example/api/v1/") == "https://x.example/api/v1"
