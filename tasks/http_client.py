"""The one ``httpx.AsyncClient`` a fetch batch uses, and the errors its transport can raise.

The client keeps httpx's API everywhere in the engine; underneath it runs on aiohttp's
connection pool by default (``httpx-aiohttp``'s transport). Measured on the sandbox web with
1,000 hosts at concurrency 64 (``benchmarks/bench_fetch.py``), httpx's own pool spent most of
the client's CPU rescanning its connections on every request (about 1.5 ms of CPU per page);
with the aiohttp transport the whole engine needs well under half of that. The plain httpx
transport stays available (``http_transport="httpx"``).

No cookies are kept (a crawler must not carry one page's session into the next request), no
environment proxies are read, redirects and Content-Encoding are handled by the engine itself.
"""

from __future__ import annotations

import http.cookiejar
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from tasks.fetch_settings import FetchSettings
from tasks.response_guard import ACCEPT_ENCODING

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
    """The batch's client: sized to ``settings.concurrency``, no cookies, no env proxies."""
    keepalive = max(5.0, min(settings.max_delay_s + 1.0, 60.0))
    limits = httpx.Limits(
        max_connections=settings.concurrency,
        max_keepalive_connections=settings.concurrency,
        keepalive_expiry=keepalive,
    )
    proxy = settings.proxy_url if settings.mode == "proxy" else None
    transport: httpx.AsyncBaseTransport | None = None
    if settings.http_transport == "aiohttp":

        def session() -> aiohttp.ClientSession:
            # Created lazily, inside the running event loop, by the transport.
            connector = aiohttp.TCPConnector(
                limit=settings.concurrency, keepalive_timeout=keepalive
            )
            return aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
            )

        transport = AiohttpTransport(
            limits=limits,
            trust_env=False,
            proxy=httpx.Proxy(proxy) if proxy else None,
            client=session,
        )
        proxy = None  # the transport carries it
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
        proxy=proxy,
        transport=transport,
    )
