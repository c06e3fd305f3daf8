"""The SSRF guard (docs/tools.md, web_fetch; docs/hooks.md, hook targets): outbound requests the server makes on behalf
of a model or a tenant (web_fetch, MCP HTTP servers, hook targets) must not reach loopback, private, link-local,
metadata or other special-use addresses, unless the operator allow-listed the host.

A host is checked by name first (blocked names and suffixes), then as an IP literal, then by resolving it: any
blocked address among the results blocks, and so does a failed lookup. The check returns the addresses it
validated so the caller can connect to exactly those (DNS rebinding: a second lookup at connect time could
answer differently)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Resolves a host name to IP address strings; raises OSError when the lookup fails.
Resolver = Callable[[str, int], Awaitable[list[str]]]

BLOCKED_NAMES = frozenset({"localhost", "metadata.google.internal", "metadata"})
BLOCKED_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".corp")

# Ranges the ipaddress properties do not all cover on every Python version; listed explicitly so the policy
# does not depend on the interpreter's tables.
_EXPLICIT_V4 = (
    ipaddress.IPv4Network("100.64.0.0/10"),  # carrier-grade NAT
    ipaddress.IPv4Network("198.18.0.0/15"),  # benchmarking
    ipaddress.IPv4Network("0.0.0.0/8"),
    ipaddress.IPv4Network("224.0.0.0/4"),  # multicast (is_global is True for parts of it)
    ipaddress.IPv4Network("240.0.0.0/4"),
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class SsrfBlocked(Exception):
    """The target is not allowed; `reason` is safe to show to the model."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CheckedHost:
    """A host that passed the guard. `addresses` are the validated addresses to connect to; empty when the
    host itself is allow-listed (connect to it normally)."""

    host: str
    addresses: tuple[str, ...] = ()

    @property
    def pinned(self) -> bool:
        return bool(self.addresses)


def normalise_host(host: str) -> str:
    """Lower case, no IPv6 brackets, no trailing root dot ("localhost." is localhost)."""
    return host.strip().strip("[]").rstrip(".").lower()


def address_block_reason(address: IPAddress) -> str | None:
    """Why an address is not reachable through the guard ("a loopback address"), or None when it is a public
    unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        # Addresses that embed an IPv4 address are judged by it (and IPv4-mapped ones are never needed).
        if address.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        if address in _NAT64:
            return address_block_reason(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None:
            return address_block_reason(address.sixtofour)
        if address.teredo is not None:
            return "a Teredo IPv6 address"
    else:
        for network in _EXPLICIT_V4:
            if address in network:
                return f"a special-use address ({network})"
    for flag, label in (
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_unspecified, "unspecified"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
    ):
        if flag:
            return f"{'an' if label == 'unspecified' else 'a'} {label} address"
    if not address.is_global:
        return "a non-global address"
    return None


def _parse_ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _name_block_reason(host: str) -> str | None:
    if host in BLOCKED_NAMES:
        return f"{host} is a blocked hostname"
    for suffix in BLOCKED_SUFFIXES:
        if host.endswith(suffix):
            return f"{host} is under a blocked domain ({suffix})"
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class SsrfGuard:
    """The guard with its allow-list. Allow-listed names skip every check; allow-listed IPs also admit a
    name that resolves to them (the operator trusts that address, whatever name leads there)."""

    def __init__(self, allow_hosts: Iterable[str] = (), resolver: Resolver | None = None) -> None:
        self._allow = frozenset(normalise_host(h) for h in allow_hosts if h.strip())
        self._resolve = resolver or system_resolver

    async def check_host(self, host: str, port: int = 0) -> CheckedHost:
        name = normalise_host(host)
        if not name:
            raise SsrfBlocked("missing hostname")
        if name in self._allow:
            return CheckedHost(host=name)
        reason = _name_block_reason(name)
        if reason is not None:
            raise SsrfBlocked(reason)
        literal = _parse_ip(name)
        if literal is not None:
            reason = address_block_reason(literal)
            if reason is not None:
                raise SsrfBlocked(f"{name} is {reason}")
            return CheckedHost(host=name, addresses=(str(literal),))
        try:
            resolved = await self._resolve(name, port)
        except OSError:
            raise SsrfBlocked(f"unable to resolve {name}") from None
        if not resolved:
            raise SsrfBlocked(f"unable to resolve {name}")
        for raw in resolved:
            address = _parse_ip(raw)
            if address is None:
                raise SsrfBlocked(f"unable to resolve {name}")
            if str(address) in self._allow:
                continue
            reason = address_block_reason(address)
            if reason is not None:
                # The address itself is not named: the model should not learn the internal network's layout.
                raise SsrfBlocked(f"{name} resolves to {reason}")
        return CheckedHost(host=name, addresses=tuple(dict.fromkeys(resolved)))

    async def check_url(self, url: str) -> CheckedHost:
        """Checks the host of an absolute URL; a URL without a host is refused."""
        try:
            parts = urlsplit(url)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower(), 0)
        except ValueError:
            raise SsrfBlocked("invalid URL") from None
        if not parts.hostname:
            raise SsrfBlocked("URL has no host")
        return await self.check_host(parts.hostname, port)


async def check_host(host: str, allow_hosts: Iterable[str] = ()) -> CheckedHost:
    return await SsrfGuard(allow_hosts).check_host(host)


async def check_url(url: str, allow_hosts: Iterable[str] = ()) -> CheckedHost:
    return await SsrfGuard(allow_hosts).check_url(url)
