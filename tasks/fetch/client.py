"""The one client a fetch batch uses: aiohttp directly by default, httpx when asked.

The engine sends requests through a ``PageClient`` and reads ``Answer`` objects: status,
raw headers, the raw body in chunks (decoded by ``tasks.fetch.response_guard``, never by the
client), and what the WARC writer needs of the request. Two implementations:

- ``AiohttpPageClient`` (default, ``http_transport="aiohttp"``): one ``aiohttp.ClientSession``,
  used directly. Measured on nginx with 1,000 loopback hosts (``benchmarks/
  bench_transports.py``), building httpx's request, URL and response models on top of
  aiohttp's for every request cost about a quarter of the engine's CPU (the engine was 3x
  bare aiohttp's CPU per page); httpx's own pool is costlier still (it rescans its
  connections on every request). So the hot path builds aiohttp's objects only.
- ``HttpxPageClient`` (``http_transport="httpx"``, and any ``httpx.AsyncClient`` handed to the
  engine, as tests do with mock transports): httpx's API and its own transport.

Both keep no cookies, read no environment proxies, follow no redirects and decode nothing
(redirects and Content-Encoding are the engine's), and pass the address policy
(``tasks.fetch.net_guard``): each request is judged before it is sent, and every host name is
resolved once through the ``DnsCache``, judged, and connected to at the judged address.
"""

from __future__ import annotations

import http.cookiejar
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import httpx
from yarl import URL

from tasks.fetch.net_guard import (
    AddressGuard,
    DnsCache,
    GuardedTransport,
    PolicyNetworkBackend,
    PolicyResolver,
    guarded_httpx_transport,
)
from tasks.fetch.response_guard import ACCEPT_ENCODING, head_size
from tasks.fetch.settings import FetchSettings

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

#: What a request can raise besides httpx's own errors.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    httpx.DecodingError,
    aiohttp.ClientError,
    OSError,
)


class Answer:
    """One response whose head has arrived; the body is read raw with ``read_chunk``.

    ``downloaded`` counts the raw body bytes read so far; ``aclose()`` gives the connection
    back (or closes it when the body was not read to its end).
    """

    __slots__ = ("downloaded", "http_version", "raw_headers", "reason", "sent_bytes", "status")

    status: int
    reason: str
    raw_headers: Sequence[tuple[bytes, bytes]]
    http_version: str
    sent_bytes: int  # the request head as sent (approximate: start line and headers)
    downloaded: int

    async def read_chunk(self) -> bytes:
        """The next raw body chunk; b"" at the end."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def request_record(self) -> tuple[str, str, list[tuple[str, str]]]:
        """(method, URL, headers as sent) of the request, for the WARC writer."""
        raise NotImplementedError


class PageClient:
    """Sends one GET and returns its ``Answer`` (see the module)."""

    async def get(self, url: str, headers: dict[str, str]) -> Answer:
        raise NotImplementedError

    def use_dns(self, cache: DnsCache) -> None:
        """Resolve through ``cache`` (the engine state's), before the first request."""
        return None

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> PageClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# ---------------------------------------------------------------------- aiohttp


class _AiohttpAnswer(Answer):
    __slots__ = ("_response", "_sent", "_url")

    def __init__(
        self, response: aiohttp.ClientResponse, url: str, sent: dict[str, str], sent_bytes: int
    ) -> None:
        self._response = response
        self._url = url
        self._sent = sent
        self.status = response.status
        self.reason = response.reason or ""
        self.raw_headers = response.raw_headers
        version = response.version
        self.http_version = f"HTTP/{version.major}.{version.minor}" if version else "HTTP/1.1"
        self.sent_bytes = sent_bytes
        self.downloaded = 0

    async def read_chunk(self) -> bytes:
        chunk = await self._response.content.readany()
        self.downloaded += len(chunk)
        return chunk

    async def aclose(self) -> None:
        # release() keeps the connection only when the body was read to its end.
        self._response.release()

    def request_record(self) -> tuple[str, str, list[tuple[str, str]]]:
        sent = self._response.request_info.headers
        return "GET", self._url, [(k, v) for k, v in sent.items()] or list(self._sent.items())


class AiohttpPageClient(PageClient):
    """One ``aiohttp.ClientSession``, created lazily inside the running event loop."""

    def __init__(
        self,
        settings: FetchSettings,
        guard: AddressGuard,
        cache: DnsCache,
        *,
        proxy: str | None = None,
    ) -> None:
        self.settings = settings
        self.guard = guard
        self.cache = cache
        self.headers = {
            "User-Agent": settings.user_agent,
            "Accept": ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        self.proxy: URL | None = None
        self.proxy_auth: aiohttp.BasicAuth | None = None
        if proxy:
            parts = urlsplit(proxy)
            if parts.username is not None:
                self.proxy_auth = aiohttp.BasicAuth(parts.username, parts.password or "")
            netloc = parts.netloc.rpartition("@")[2]
            self.proxy = URL(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
        # The attempt's total (request_timeout_s) is the engine's own asyncio timeout; a
        # per-read timer here would only be rescheduled on every chunk.
        self.timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=settings.connect_timeout_s, sock_read=None
        )
        # The request head's size, less what varies (path, Host and extra headers).
        self._head_base = head_size(
            "GET  HTTP/1.1", [(k.encode(), v.encode()) for k, v in self.headers.items()]
        ) + len("Host: \r\n")
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        settings = self.settings
        keepalive = max(5.0, min(settings.max_delay_s + 1.0, 60.0))
        connector = aiohttp.TCPConnector(
            limit=settings.concurrency,
            keepalive_timeout=keepalive,
            resolver=PolicyResolver(settings.address_policy, self.cache),
            use_dns_cache=False,  # the DnsCache is the one cache (its entries are judged)
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
            headers=self.headers,
            timeout=self.timeout,
        )
        # aiohttp resends an idempotent request once by itself when a kept-alive connection
        # is reset, behind the engine's pacing and retry budget; it has no public switch
        # (aio-libs/aiohttp#10790), so turn the attribute off. Retries are the engine's.
        session._retry_connection = False
        self._session = session
        return session

    def use_dns(self, cache: DnsCache) -> None:
        if self._session is not None:
            raise RuntimeError("use_dns after the first request")
        self.cache = self.guard.cache = cache

    async def get(self, url: str, headers: dict[str, str]) -> Answer:
        if not self.guard.passes_direct(url):
            await self.guard.check_url(url)
        session = self._session or self._open()
        try:
            target = URL(url, encoded=True)  # normalized by the engine: quote nothing again
        except (ValueError, TypeError) as exc:
            raise httpx.InvalidURL(f"{url!r}: {exc}") from exc
        response = await session.request(
            "GET",
            target,
            headers=headers or None,
            allow_redirects=False,
            proxy=self.proxy,
            proxy_auth=self.proxy_auth,
        )
        sent = self._head_base + len(target.raw_path_qs) + len(target.raw_authority)
        for key, value in headers.items():
            sent += len(key) + len(value) + 4
        return _AiohttpAnswer(response, url, headers, sent)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


# ---------------------------------------------------------------------- httpx


class _HttpxAnswer(Answer):
    __slots__ = ("_chunks", "_response")

    def __init__(self, response: httpx.Response, sent_bytes: int) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] = response.aiter_raw()
        self.status = response.status_code
        self.reason = response.reason_phrase
        self.raw_headers = response.headers.raw
        self.http_version = response.http_version
        self.sent_bytes = sent_bytes
        self.downloaded = 0

    async def read_chunk(self) -> bytes:
        while True:
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                return b""
            if chunk:
                self.downloaded += len(chunk)
                return chunk

    async def aclose(self) -> None:
        await self._response.aclose()

    def request_record(self) -> tuple[str, str, list[tuple[str, str]]]:
        request = self._response.request
        sent = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        return request.method, str(request.url), sent


class HttpxPageClient(PageClient):
    """An ``httpx.AsyncClient`` behind the ``PageClient`` interface (``guard`` and
    ``backend``: the address policy's parts it was built with, if any)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        guard: AddressGuard | None = None,
        backend: PolicyNetworkBackend | None = None,
    ) -> None:
        self.client = client
        self.guard = guard
        self.backend = backend

    def use_dns(self, cache: DnsCache) -> None:
        if self.guard is not None:
            self.guard.cache = cache
        if self.backend is not None:
            self.backend.cache = cache

    async def get(self, url: str, headers: dict[str, str]) -> Answer:
        client = self.client
        request = client.build_request("GET", url, headers=headers)
        sent = head_size(f"GET {request.url.raw_path.decode()} HTTP/1.1", request.headers.raw)
        response = await client.send(request, stream=True)
        return _HttpxAnswer(response, sent)

    async def aclose(self) -> None:
        await self.client.aclose()


class _NoCookieJar(http.cookiejar.CookieJar):
    """Keeps nothing and sends nothing, without even parsing Set-Cookie (httpx asks the jar
    on every response, and building the message for it showed up in the profile)."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def add_cookie_header(self, request: Any) -> None:
        return None


def as_page_client(client: PageClient | httpx.AsyncClient) -> PageClient:
    """``client`` itself, or an ``httpx.AsyncClient`` wrapped as a ``PageClient``."""
    return client if isinstance(client, PageClient) else HttpxPageClient(client)


def make_client(settings: FetchSettings, dns: DnsCache | None = None) -> PageClient:
    """The batch's client: sized to ``settings.concurrency``, no cookies, no env proxies, every
    request judged by the address policy, host names resolved through ``dns`` (default: a
    cache of its own; the engine hands its state's over with ``PageClient.use_dns``)."""
    cache = dns if dns is not None else DnsCache(settings.dns_ttl_s)
    policy = settings.address_policy
    proxy_url = settings.proxy_url.get_secret_value() if settings.proxy_url else None
    proxied = proxy_url if proxy_url and settings.mode == "proxy" else None
    gateway = {"api": settings.api_url, "proxy": proxy_url}.get(settings.mode)
    guard = AddressGuard(
        policy,
        relay=settings.mode,
        api_url=settings.api_url,
        gateways=[gateway] if gateway else (),
        cache=cache,
    )
    if settings.http_transport == "aiohttp":
        return AiohttpPageClient(settings, guard, cache, proxy=proxied)
    keepalive = max(5.0, min(settings.max_delay_s + 1.0, 60.0))
    limits = httpx.Limits(
        max_connections=settings.concurrency,
        max_keepalive_connections=settings.concurrency,
        keepalive_expiry=keepalive,
    )
    proxy = httpx.Proxy(proxied) if proxied else None
    inner = guarded_httpx_transport(policy, limits=limits, proxy=proxy, cache=cache)
    client = httpx.AsyncClient(
        headers={
            "User-Agent": settings.user_agent,
            "Accept": ACCEPT,
            "Accept-Encoding": ACCEPT_ENCODING,
        },
        cookies=_NoCookieJar(),
        limits=limits,
        timeout=httpx.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
        follow_redirects=False,
        trust_env=False,
        transport=GuardedTransport(inner, guard),
    )
    backend = inner._pool._network_backend
    assert isinstance(backend, PolicyNetworkBackend)
    return HttpxPageClient(client, guard, backend)
