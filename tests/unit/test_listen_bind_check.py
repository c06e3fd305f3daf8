"""The bind check `serve` makes before gRPC binds `listen`: an address no socket can bind is refused with the
system's reason and gRPC is never asked (so it logs nothing of its own); an address one of whose resolutions
binds goes on to gRPC, which serves on the ones it can bind."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from general_agent_server.api import transport
from general_agent_server.api.transport import ListenError
from general_agent_server.config import load_settings


@pytest.fixture
def held() -> Iterator[int]:
    """A port a listening IPv4 socket holds on 127.0.0.1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


class _NoBind:
    """A server that must not be asked to bind."""

    def add_insecure_port(self, address: str) -> int:
        raise AssertionError(f"gRPC was asked to bind {address}")


def test_a_held_port_is_refused_before_grpc_binds(held: int) -> None:
    settings = load_settings(None, {"GENERAL_AGENT_LISTEN": f"127.0.0.1:{held}"})
    with pytest.raises(ListenError, match=rf"^listen: cannot bind 127\.0\.0\.1:{held}: Address already in use$"):
        transport.add_port(_NoBind(), settings)  # type: ignore[arg-type]


def test_a_free_port_is_left_to_grpc() -> None:
    assert transport._bind_failure("127.0.0.1:0") is None


def test_an_unresolvable_host_names_the_resolver_error() -> None:
    reason = transport._bind_failure("no-such-host.invalid:50051")
    # getaddrinfo's own words ("Name or service not known" with a resolver, another message without one)
    assert reason, reason
    assert reason != "it resolves to no address"


def test_one_resolution_that_binds_is_enough(held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A name that resolves to the held IPv4 port and to a free IPv6 one: gRPC binds the IPv6 one and serves.
    stream = socket.SOCK_STREAM

    def both(host: Any, port: Any, **_: Any) -> list[Any]:
        return [
            (socket.AF_INET, stream, 6, "", ("127.0.0.1", held)),
            (socket.AF_INET6, stream, 6, "", ("::1", held, 0, 0)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", both)
    assert transport._bind_failure(f"dual.example:{held}") is None


def test_every_resolution_held_gives_the_first_reason(held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = socket.SOCK_STREAM

    def twice(host: Any, port: Any, **_: Any) -> list[Any]:
        return [(socket.AF_INET, stream, 6, "", ("127.0.0.1", held))] * 2

    monkeypatch.setattr(socket, "getaddrinfo", twice)
    assert transport._bind_failure(f"twice.example:{held}") == "Address already in use"
