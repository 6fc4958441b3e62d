"""The address policy (``models.fetching.net_policy``) applied where connections are made.

Three layers, so that no request escapes it and no answer from DNS is used unchecked:

- ``GuardedTransport`` wraps the client's transport and judges every request before it
  leaves (every redirect hop is a request): its scheme, an IP-literal host, and, when the
  request goes through a forward proxy or a scraping API that will resolve the target
  itself, the target's resolved addresses (the gateway's own address is judged when the
  connection to it is made, like any other).
- ``PolicyResolver`` (aiohttp) and ``PolicyNetworkBackend`` (httpcore) resolve a host name
  once, judge every address it resolves to (one refused address refuses the host), and
  hand exactly those addresses to the connection. The address checked is the address
  connected to: there is no second lookup an attacker's DNS could answer differently
  (DNS rebinding). Host header, SNI and certificate checks keep the name.

A refusal raises ``AddressRefusedError`` (an ``httpx.ConnectError``, so code that handles
httpx's errors handles it); ``refusal_in`` finds one inside the exception chains that aiohttp
and httpx build around it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpcore
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from models.fetching.net_policy import AddressPolicy, parse_address, parse_networks

#: Environment variable of the allow-list for clients built outside ``FetchSettings``
#: (sitemaps, discovery): comma-separated CIDR networks.
ALLOWED_NETWORKS_ENV = "RECRAWL_ALLOWED_NETWORKS"


class AddressRefusedError(httpx.ConnectError):
    """A request the address policy refused before any byte was sent; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"address refused: {reason}")
        self.reason = reason


def refusal_in(exc: BaseException | None) -> AddressRefusedError | None:
    """The ``AddressRefusedError`` behind ``exc`` (itself, or in its cause/context chain)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, AddressRefusedError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def networks_from_env() -> tuple[str, ...]:
    """The allow-list in ``RECRAWL_ALLOWED_NETWORKS`` (comma-separated), checked."""
    raw = os.environ.get(ALLOWED_NETWORKS_ENV, "")
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    parse_networks(values)  # a bad value fails here, naming itself
    return values


def judge_resolved(host: str, addresses: Iterable[str], policy: AddressPolicy) -> None:
    """Raise ``AddressRefusedError`` if any address ``host`` resolved to is refused."""
    for text in addresses:
        address = parse_address(text)
        if address is None:
            raise AddressRefusedError(f"{host} resolved to {text!r}, not an IP address")
        why = policy.refused_class(address)
        if why is not None:
            if parse_address(host) is not None:
                raise AddressRefusedError(f"{address} is {why}")
            raise AddressRefusedError(f"{host} resolves to {address} ({why})")


class PolicyResolver(AbstractResolver):
    """aiohttp resolver: getaddrinfo in a thread, then every address judged by the policy.

    aiohttp connects to the addresses returned here (IP literals never reach a resolver:
    ``GuardedTransport`` judges those), so the check and the connection see the same address.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        judge_resolved(host, (r["host"] for r in results), self.policy)
        return results

    async def close(self) -> None:
        await self._inner.close()


class PolicyNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore backend: resolve once, judge every address, connect to a judged address."""

    def __init__(self, policy: AddressPolicy, inner: httpcore.AsyncNetworkBackend | None = None):
        self.policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await _resolve(host, port)
        judge_resolved(host, addresses, self.policy)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefusedError(f"unix socket {path!r} is not a network address")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _resolve(host: str, port: int) -> list[str]:
    """Addresses of ``host`` (a literal stays itself), in getaddrinfo's order, deduplicated."""
    literal = parse_address(host)
    if literal is not None:
        return [str(literal)]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class AddressGuard:
    """Judges the URLs of one client's requests (see the module docstring).

    ``relay`` is how requests leave: ``direct``, ``proxy`` (the request URL is the target,
    the proxy resolves it) or ``api`` (the target is the ``url`` parameter of a request to
    ``api_url``). ``gateways`` are the proxy/API URLs, whose IP literals are judged too.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        relay: str = "direct",
        api_url: str | None = None,
        gateways: Iterable[str] = (),
    ) -> None:
        self.policy = policy
        self.relay = relay
        self.api_origin = _origin(api_url) if api_url else None
        self.gateway_refusal: str | None = None
        for gateway in gateways:
            parts = urlsplit(gateway)
            why = policy.host_refusal(parts.hostname or "")
            if why is not None and self.gateway_refusal is None:
                self.gateway_refusal = f"gateway {parts.hostname}: {why}"
        self._targets: dict[str, asyncio.Future[str | None]] = {}

    async def check(self, url: httpx.URL) -> None:
        """Raise ``AddressRefusedError`` if the request to ``url`` may not be sent."""
        if self.gateway_refusal is not None:
            raise AddressRefusedError(self.gateway_refusal)
        self._check_literal(url.scheme, url.host)
        if self.relay == "proxy":
            await self._check_relayed(url.scheme, url.host)
        elif self.relay == "api" and self.api_origin == _origin(str(url)):
            target = parse_qs(url.query.decode("ascii", "replace")).get("url")
            if target:
                parts = urlsplit(target[0])
                self._check_literal(parts.scheme, parts.hostname or "")
                await self._check_relayed(parts.scheme, parts.hostname or "")

    def _check_literal(self, scheme: str, host: str) -> None:
        why = self.policy.scheme_refusal(scheme) or self.policy.host_refusal(host)
        if why is not None:
            raise AddressRefusedError(why)

    async def _check_relayed(self, scheme: str, host: str) -> None:
        """A target the gateway resolves: resolve it here too and judge what it names.

        A name that does not resolve here passes (the gateway may know names we do not);
        one that resolves to a refused address is refused. Verdicts are kept per host for
        the client's life (one batch).
        """
        if parse_address(host) is not None or not host:
            return
        pending = self._targets.get(host)
        if pending is None:
            pending = asyncio.ensure_future(self._judge_target(host, scheme))
            self._targets[host] = pending
        why = await asyncio.shield(pending)
        if why is not None:
            raise AddressRefusedError(why)

    async def _judge_target(self, host: str, scheme: str) -> str | None:
        port = 443 if scheme == "https" else 80
        try:
            addresses = await _resolve(host, port)
        except httpcore.ConnectError:
            return None
        try:
            judge_resolved(host, addresses, self.policy)
        except AddressRefusedError as exc:
            return exc.reason
        return None


class GuardedTransport(httpx.AsyncBaseTransport):
    """Judges every request with an ``AddressGuard`` before the inner transport sends it."""

    def __init__(self, inner: httpx.AsyncBaseTransport, guard: AddressGuard) -> None:
        self.inner = inner
        self.guard = guard

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self.guard.check(request.url)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def guarded_httpx_transport(
    policy: AddressPolicy, *, limits: httpx.Limits, proxy: httpx.Proxy | None = None
) -> httpx.AsyncHTTPTransport:
    """httpx's own transport with ``PolicyNetworkBackend`` under its pool.

    httpx 0.28 takes no network backend argument (encode/httpx PR 3749 adds one), so the
    backend is set on the pool it builds; a pool without that attribute fails loudly here
    rather than connecting unchecked.
    """
    transport = httpx.AsyncHTTPTransport(limits=limits, proxy=proxy, trust_env=False)
    pool = transport._pool
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpcore pool has no _network_backend: cannot pin resolution")
    pool._network_backend = PolicyNetworkBackend(policy)
    return transport


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"
