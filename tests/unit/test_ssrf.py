"""The SSRF guard: blocked names, blocked address literals, DNS results, lookup failures and the allow-list."""

from __future__ import annotations

import socket

import pytest

from general_agent_server.security.ssrf import CheckedHost, SsrfBlocked, SsrfGuard, check_host, check_url


def resolver_of(table: dict[str, list[str]]) -> tuple[SsrfGuard, list[str]]:
    """A guard whose DNS answers from `table` (unknown names fail like NXDOMAIN), and the names it was asked."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return SsrfGuard(resolver=resolve), asked


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("localhost", "localhost is a blocked hostname"),
        ("LOCALHOST.", "localhost is a blocked hostname"),
        ("metadata.google.internal", "metadata.google.internal is a blocked hostname"),
        ("db.internal", "db.internal is under a blocked domain (.internal)"),
        ("printer.local", "printer.local is under a blocked domain (.local)"),
        ("app.localhost", "app.localhost is under a blocked domain (.localhost)"),
        ("nas.home.arpa", "nas.home.arpa is under a blocked domain (.home.arpa)"),
        ("wiki.corp", "wiki.corp is under a blocked domain (.corp)"),
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("127.8.9.10", "127.8.9.10 is a loopback address"),
        ("10.1.2.3", "10.1.2.3 is a private address"),
        ("172.16.0.1", "172.16.0.1 is a private address"),
        ("192.168.1.1", "192.168.1.1 is a private address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address"),
        ("0.0.0.0", "0.0.0.0 is a special-use address (0.0.0.0/8)"),
        ("100.64.0.1", "100.64.0.1 is a special-use address (100.64.0.0/10)"),
        ("198.18.0.1", "198.18.0.1 is a special-use address (198.18.0.0/15)"),
        ("224.0.0.1", "224.0.0.1 is a special-use address (224.0.0.0/4)"),
        ("240.0.0.1", "240.0.0.1 is a special-use address (240.0.0.0/4)"),
        ("[::1]", "::1 is a loopback address"),
        ("::", ":: is an unspecified address"),
        ("fe80::1", "fe80::1 is a link-local address"),
        ("fd12:3456::1", "fd12:3456::1 is a private address"),
        ("ff02::1", "ff02::1 is a multicast address"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1 is an IPv4-mapped IPv6 address"),
        ("[::ffff:8.8.8.8]", "::ffff:8.8.8.8 is an IPv4-mapped IPv6 address"),
        ("64:ff9b::a00:1", "64:ff9b::a00:1 is a private address"),
        ("2002:a00:1::", "2002:a00:1:: is a private address"),
    ],
)
async def test_blocked_names_and_literals(host: str, reason: str) -> None:
    guard, asked = resolver_of({})
    with pytest.raises(SsrfBlocked) as blocked:
        await guard.check_host(host)
    assert blocked.value.reason == reason
    assert asked == []  # decided without DNS


@pytest.mark.parametrize("host", ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "[2001:4860:4860::8888]"])
async def test_public_literals_pass_and_are_pinned_to_themselves(host: str) -> None:
    guard, asked = resolver_of({})
    checked = await guard.check_host(host)
    assert checked.addresses == (host.strip("[]"),)
    assert checked.pinned
    assert asked == []


async def test_name_resolving_to_a_private_address_is_blocked_without_naming_it() -> None:
    guard, asked = resolver_of({"intranet.example": ["10.20.30.40"]})
    with pytest.raises(SsrfBlocked) as blocked:
        await guard.check_host("Intranet.Example")
    assert blocked.value.reason == "intranet.example resolves to a private address"
    assert "10.20.30.40" not in str(blocked.value)
    assert asked == ["intranet.example"]


async def test_any_private_result_blocks() -> None:
    guard, _ = resolver_of({"mixed.example": ["93.184.216.34", "169.254.169.254"]})
    with pytest.raises(SsrfBlocked, match="resolves to a link-local address"):
        await guard.check_host("mixed.example")


async def test_public_resolution_returns_every_validated_address() -> None:
    guard, _ = resolver_of({"www.example": ["93.184.216.34", "2606:2800:220:1::1", "93.184.216.34"]})
    assert await guard.check_host("www.example") == CheckedHost(
        host="www.example", addresses=("93.184.216.34", "2606:2800:220:1::1")
    )


@pytest.mark.parametrize("table", [{}, {"empty.example": []}, {"empty.example": ["not-an-ip"]}])
async def test_lookup_failure_blocks(table: dict[str, list[str]]) -> None:
    guard, _ = resolver_of(table)
    with pytest.raises(SsrfBlocked, match=r"^unable to resolve empty\.example$"):
        await guard.check_host("empty.example")


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1"])
async def test_numeric_spellings_of_loopback_are_caught_by_the_system_resolver(host: str) -> None:
    # The C resolver reads these as IPv4 addresses (inet_aton) without touching the network.
    with pytest.raises(SsrfBlocked, match="resolves to a loopback address"):
        await check_host(host)


async def test_allow_list_by_name_skips_every_check() -> None:
    guard = SsrfGuard(allow_hosts=["LocalHost", " 127.0.0.1 ", "[::1]"])
    assert await guard.check_host("localhost") == CheckedHost(host="localhost")
    assert await guard.check_host("127.0.0.1") == CheckedHost(host="127.0.0.1")
    assert await guard.check_host("::1") == CheckedHost(host="::1")
    assert not (await guard.check_host("127.0.0.1")).pinned
    with pytest.raises(SsrfBlocked):
        await guard.check_host("127.0.0.2")


async def test_allow_listed_address_admits_a_name_resolving_to_it_pinned() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    guard = SsrfGuard(allow_hosts=["127.0.0.1"], resolver=resolve)
    assert await guard.check_host("dev.example") == CheckedHost(host="dev.example", addresses=("127.0.0.1",))
    with pytest.raises(SsrfBlocked):
        await SsrfGuard(resolver=resolve).check_host("dev.example")


async def test_check_url() -> None:
    with pytest.raises(SsrfBlocked, match="link-local"):
        await check_url("http://169.254.169.254/latest/meta-data/")
    with pytest.raises(SsrfBlocked, match="loopback"):
        await check_url("https://[::1]:8443/x")
    with pytest.raises(SsrfBlocked, match="URL has no host"):
        await check_url("file:///etc/passwd")
    with pytest.raises(SsrfBlocked, match="invalid URL"):
        await check_url("http://example.com:99999/")
    assert (await check_url("http://127.0.0.1:8080/", allow_hosts=["127.0.0.1"])).host == "127.0.0.1"
    assert (await check_url("https://8.8.8.8/dns")).addresses == ("8.8.8.8",)
