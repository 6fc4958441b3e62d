"""The one ``httpx.AsyncClient`` a fetch batch uses, and the errors its transport can raise.

The client keeps httpx's API everywhere in the engine; underneath it runs on aiohttp's
connection pool by default (``httpx-aiohttp``'s transport). Measured on the sandbox web with
1,000 hosts at concurrency 64 (``benchmarks/bench_fetch.py``), httpx's own pool spent most of
the client's CPU rescanning its connections on every request (about 1.5 ms of CPU per page);
with the aiohttp transport the whole engine needs well under half of that. The plain httpx
transport stays available (``http_transport="httpx"``).

No cookies are kept (a crawler must not carry one page's session into the next request), no
environment proxies are read, redirects and Content-Encoding are handled by the engine itself.
Every request passes the address policy (``tasks.fetch.net_guard``): each is judged before it is
sent, and every host name is resolved once, judged, and connected to at the judged address.
"""

from __future__ import annotations

import http.cookiejar
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from tasks.fetch.net_guard import (
    AddressGuard,
    GuardedTransport,
    PolicyResolver,
    guarded_httpx_transport,
)
from tasks.fetch.response_guard import ACCEPT_ENCODING
from tasks.fetch.settings import FetchSettings

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

#: What a request can raise besides httpx's own errors (the aiohttp transport maps only some).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    httpx.DecodingError,
    aiohttp.ClientError,
    OSError,
)


class _NoCookieJar(http.cookiejar.CookieJar):
    """Keeps nothing and sends nothing, without even parsing Set-Cookie (httpx asks the jar
    on every response, and building the message for it showed up in the profile)."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def add_cookie_header(self, request: Any) -> None:
        return None


def make_client(settings: FetchSettings) -> httpx.AsyncClient:
    """The batch's client: sized to ``settings.concurrency``, no cookies, no env proxies, every
    request judged by the address policy."""
    keepalive = max(5.0, min(settings.max_delay_s + 1.0, 60.0))
    limits = httpx.Limits(
        max_connections=settings.concurrency,
        max_keepalive_connections=settings.concurrency,
        keepalive_expiry=keepalive,
    )
    policy = settings.address_policy
    proxy_url = settings.proxy_url.get_secret_value() if settings.proxy_url else None
    proxy = httpx.Proxy(proxy_url) if proxy_url and settings.mode == "proxy" else None
    inner: httpx.AsyncBaseTransport
    if settings.http_transport == "aiohttp":

        def session() -> aiohttp.ClientSession:
            # Created lazily, inside the running event loop, by the transport.
            connector = aiohttp.TCPConnector(
                limit=settings.concurrency,
                keepalive_timeout=keepalive,
                resolver=PolicyResolver(policy),
            )
            client = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
            )
            # aiohttp resends an idempotent request once by itself when a kept-alive
            # connection is reset, behind the engine's pacing and retry budget; it has no
            # public switch (aio-libs/aiohttp#10790), so turn the attribute off. Retries are
            # the engine's decision only.
            client._retry_connection = False
            return client

        inner = AiohttpTransport(limits=limits, trust_env=False, proxy=proxy, client=session)
    else:
        inner = guarded_httpx_transport(policy, limits=limits, proxy=proxy)
    gateway = {"api": settings.api_url, "proxy": proxy_url}.get(settings.mode)
    guard = AddressGuard(
        policy,
        relay=settings.mode,
        api_url=settings.api_url,
        gateways=[gateway] if gateway else (),
    )
    return httpx.AsyncClient(
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
