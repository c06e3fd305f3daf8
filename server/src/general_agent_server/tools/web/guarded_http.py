"""GET through the SSRF guard: a manual redirect loop that checks every hop, connections pinned to the
addresses the guard validated, and a body read that stops at a byte cap.

Pinning: for a guarded host the request goes to the validated IP, with the original Host header and (for
https) the original name as TLS SNI and certificate name (httpx's `sni_hostname` extension). No second DNS
lookup happens between the check and the connect, so a rebinding DNS server cannot swap in a private address.
Allow-listed names are connected to normally. Environment proxies are ignored (trust_env=False): a proxy would
make the pinned address meaningless.

POST (the Firecrawl API) goes through the same guard and pinning, without following redirects."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from general_agent_server.security.ssrf import CheckedHost, SsrfBlocked, SsrfGuard
from general_agent_server.tools.runtime import ToolFailure

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
INVALID_URL = "Invalid URL: must be http or https"


class FetchBlocked(ToolFailure):
    """The SSRF guard refused a hop. Never retried through another route: the Firecrawl fallback would fetch what
    the guard refused."""


class FetchFailed(ToolFailure):
    """No usable response: connection, timeout, protocol error or too many redirects. A caller may retry
    through another route (the Firecrawl fallback)."""


@dataclass(frozen=True, slots=True)
class FetchedResponse:
    url: str  # after redirects
    status: int
    media_type: str  # lower case, without parameters
    charset: str | None
    body: bytes
    body_truncated: bool

    def text(self) -> str:
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:  # an unknown charset name from the server
            return self.body.decode("utf-8", errors="replace")


def parse_http_url(raw: str) -> httpx.URL:
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL:
        raise ToolFailure(INVALID_URL) from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ToolFailure(INVALID_URL)
    return url


def _ascii_host(url: httpx.URL) -> str:
    """The host as sent on the wire (IDNA-encoded), which is what DNS and TLS see."""
    return url.raw_host.decode("ascii")


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Decoded body bytes up to `limit` (a compressed bomb is cut like any other large body)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        room = limit - len(body)
        if len(chunk) > room:
            body += chunk[:room]
            return bytes(body), True
        body += chunk
    return bytes(body), False


class GuardedFetcher:
    def __init__(
        self,
        guard: SsrfGuard,
        *,
        timeout_seconds: float,
        max_redirects: int,
        transport: httpx.AsyncBaseTransport | None = None,
        failure_prefix: str = "Web fetch failed",
    ) -> None:
        self._guard = guard
        self._timeout = timeout_seconds
        self._max_redirects = max_redirects
        self._transport = transport
        self._failure_prefix = failure_prefix

    def _client(self) -> httpx.AsyncClient:
        # A fresh client per fetch: pooled connections are keyed by the pinned IP, and must not be reused
        # for another name's TLS session.
        return httpx.AsyncClient(
            follow_redirects=False, trust_env=False, timeout=self._timeout, transport=self._transport
        )

    async def _check(self, url: httpx.URL) -> CheckedHost:
        try:
            return await self._guard.check_host(_ascii_host(url), url.port or _default_port(url))
        except SsrfBlocked as blocked:
            raise FetchBlocked(f"SSRF blocked: {blocked.reason}") from None

    async def get(
        self, raw_url: str, *, headers: Mapping[str, str], max_bytes: int, max_error_bytes: int
    ) -> FetchedResponse:
        """The final response; 2xx bodies are read up to max_bytes, others up to max_error_bytes."""
        url = parse_http_url(raw_url)
        async with self._client() as client:
            for _ in range(self._max_redirects + 1):
                checked = await self._check(url)
                async with self._open(client, "GET", url, checked, headers) as response:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        url = parse_http_url(str(url.join(location)))
                        continue
                    limit = max_bytes if response.is_success else max_error_bytes
                    return await _fetched(response, url, limit)
        raise FetchFailed(f"Too many redirects fetching {raw_url}")

    async def post(
        self, raw_url: str, *, headers: Mapping[str, str], content: bytes, max_bytes: int
    ) -> FetchedResponse:
        """One POST; a redirect is returned as the (non-2xx) response, not followed."""
        url = parse_http_url(raw_url)
        async with self._client() as client:
            checked = await self._check(url)
            async with self._open(client, "POST", url, checked, headers, content) as response:
                return await _fetched(response, url, max_bytes)

    @asynccontextmanager
    async def _open(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: httpx.URL,
        checked: CheckedHost,
        headers: Mapping[str, str],
        content: bytes | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """Sends to each validated address in turn until one connects."""
        prefix = self._failure_prefix
        targets: tuple[str | None, ...] = checked.addresses or (None,)
        for index, address in enumerate(targets):
            request = _request(client, method, url, address, headers, content)
            try:
                response = await client.send(request, stream=True)
            except httpx.ConnectError:
                if index + 1 < len(targets):
                    continue
                raise FetchFailed(f"{prefix}: could not connect to {url.host}") from None
            except httpx.TimeoutException:
                raise FetchFailed(f"{prefix}: timed out fetching {url}") from None
            except httpx.HTTPError as exc:
                raise FetchFailed(f"{prefix}: {type(exc).__name__} fetching {url}") from None
            try:
                yield response
            except httpx.TimeoutException:
                raise FetchFailed(f"{prefix}: timed out reading {url}") from None
            except httpx.HTTPError as exc:
                raise FetchFailed(f"{prefix}: {type(exc).__name__} reading {url}") from None
            finally:
                await response.aclose()
            return


async def _fetched(response: httpx.Response, url: httpx.URL, limit: int) -> FetchedResponse:
    body, truncated = await _read_capped(response, limit)
    return FetchedResponse(
        url=str(url),
        status=response.status_code,
        media_type=response.headers.get("content-type", "").split(";")[0].strip().lower(),
        charset=response.charset_encoding,
        body=body,
        body_truncated=truncated,
    )


def _request(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    address: str | None,
    headers: Mapping[str, str],
    content: bytes | None,
) -> httpx.Request:
    if address is None:
        return client.build_request(method, url, headers=headers, content=content)
    pinned_headers = {**headers, "Host": url.netloc.decode("ascii")}
    extensions = {"sni_hostname": _ascii_host(url)} if url.scheme == "https" else {}
    return client.build_request(
        method, url.copy_with(host=address), headers=pinned_headers, content=content, extensions=extensions
    )
