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

Resolutions are kept in a ``DnsCache`` near the fetchers (one per ``EngineState``, so
shared by the batches of a process that fetch with the same settings; a client built on
its own gets one of its own): a host name is looked up once per ``ttl_s`` (300 s by
default, ``FetchSettings.dns_ttl_s``; a failed lookup is kept ``negative_ttl_s``, 30 s), and
what the cache holds are the addresses as DNS gave them, judged again by the policy on every
use, so a connection always goes to an address that was judged, and only ever to one the
cache holds (no second lookup). Concurrent misses for one name in one event loop share one
lookup.

A refusal raises ``AddressRefusedError`` (an ``httpx.ConnectError``, so code that handles
httpx's errors handles it); ``refusal_in`` finds one inside the exception chains that aiohttp
and httpx build around it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpcore
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from models.fetching.net_policy import AddressPolicy, parse_address, parse_networks

#: Environment variable of the allow-list for clients built outside ``FetchSettings``
#: (sitemaps, discovery): comma-separated CIDR networks.
ALLOWED_NETWORKS_ENV = "RECRAWL_ALLOWED_NETWORKS"
#: How long a host name's addresses are kept (seconds), and a failed lookup.
DNS_TTL_S = 300.0
DNS_NEGATIVE_TTL_S = 30.0
#: ``lookup(host)``: the host's addresses, in the resolver's order (raises ``OSError``).
Lookup = Callable[[str], Awaitable[list[str]]]


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


class DnsCache:
    """Host names' addresses, kept ``ttl_s`` seconds after their lookup (see the module).

    Thread-safe (the batches of a process share one, each in its own event loop); a failed
    lookup is kept ``negative_ttl_s``. ``lookups`` counts the lookups made. ``lookup`` and
    ``clock`` are replaceable for tests (defaults: getaddrinfo in the loop's executor, and
    ``time.monotonic``).
    """

    def __init__(
        self,
        ttl_s: float = DNS_TTL_S,
        *,
        negative_ttl_s: float = DNS_NEGATIVE_TTL_S,
        lookup: Lookup | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s < 0 or negative_ttl_s < 0:
            raise ValueError("DNS cache lifetimes must be >= 0 seconds")
        self.ttl_s = ttl_s
        self.negative_ttl_s = negative_ttl_s
        self._lookup = lookup or _getaddrinfo
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, list[str] | str]] = {}  # expiry, addresses|error
        self._pending: dict[tuple[int, str], asyncio.Future[list[str] | str]] = {}
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def addresses(self, host: str) -> list[str]:
        """The addresses of ``host`` (cached or looked up now); ``OSError`` if it has none."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(host)
        if entry is None or entry[0] <= now:
            key = (id(asyncio.get_running_loop()), host)
            pending = self._pending.get(key)
            if pending is None:
                pending = asyncio.ensure_future(self._fill(host))
                self._pending[key] = pending
                pending.add_done_callback(lambda _: self._pending.pop(key, None))
            result = await asyncio.shield(pending)
        else:
            result = entry[1]
        if isinstance(result, str):
            raise OSError(f"cannot resolve {host!r}: {result}")
        return result

    async def _fill(self, host: str) -> list[str] | str:
        self.lookups += 1
        result: list[str] | str
        try:
            found = await self._lookup(host)
            result = list(dict.fromkeys(found)) or "no address"
        except OSError as exc:
            result = str(exc) or type(exc).__name__
        ttl = self.negative_ttl_s if isinstance(result, str) else self.ttl_s
        with self._lock:
            self._entries[host] = (self._clock() + ttl, result)
        return result

    async def judged(self, host: str, policy: AddressPolicy) -> list[str]:
        """``host``'s addresses once the policy allowed every one (``AddressRefusedError``
        otherwise); a literal is judged as itself, without a lookup."""
        literal = parse_address(host)
        addresses = [str(literal)] if literal is not None else await self.addresses(host)
        judge_resolved(host, addresses, policy)
        return addresses


async def _getaddrinfo(host: str) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class PolicyResolver(AbstractResolver):
    """aiohttp resolver: addresses from the ``DnsCache``, every one judged by the policy.

    aiohttp connects to the addresses returned here (IP literals never reach a resolver:
    the guard judges those), so the check and the connection see the same address. The
    connector's own DNS cache must be off (``use_dns_cache=False``): this is the one cache.
    """

    def __init__(self, policy: AddressPolicy, cache: DnsCache | None = None) -> None:
        self.policy = policy
        self.cache = cache if cache is not None else DnsCache()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addresses = await self.cache.judged(host, self.policy)
        except AddressRefusedError:
            raise
        except OSError as exc:
            raise OSError(f"cannot resolve {host!r}: {exc}") from exc
        results: list[ResolveResult] = []
        for text in addresses:
            kind = socket.AF_INET6 if ":" in text else socket.AF_INET
            if family in (socket.AF_INET, socket.AF_INET6) and kind != family:
                continue
            results.append(
                {
                    "hostname": host,
                    "host": text,
                    "port": port,
                    "family": kind,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                }
            )
        if not results:
            raise OSError(f"cannot resolve {host!r}: no address of family {family!r}")
        return results

    async def close(self) -> None:
        return None


class PolicyNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore backend: resolve once (the ``DnsCache``), judge every address, connect to a
    judged address."""

    def __init__(
        self,
        policy: AddressPolicy,
        inner: httpcore.AsyncNetworkBackend | None = None,
        cache: DnsCache | None = None,
    ):
        self.policy = policy
        self._inner = inner or httpcore.AnyIOBackend()
        self.cache = cache if cache is not None else DnsCache()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await _resolve(host, self.cache)
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


async def _resolve(host: str, cache: DnsCache) -> list[str]:
    """Addresses of ``host`` (a literal stays itself), in the resolver's order, deduplicated."""
    literal = parse_address(host)
    if literal is not None:
        return [str(literal)]
    try:
        return await cache.addresses(host)
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc


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
        cache: DnsCache | None = None,
    ) -> None:
        self.policy = policy
        self.relay = relay
        self.api_origin = _origin(api_url) if api_url else None
        self.cache = cache if cache is not None else DnsCache()
        self.gateway_refusal: str | None = None
        for gateway in gateways:
            parts = urlsplit(gateway)
            why = policy.host_refusal(parts.hostname or "")
            if why is not None and self.gateway_refusal is None:
                self.gateway_refusal = f"gateway {parts.hostname}: {why}"
        self._targets: dict[str, asyncio.Future[str | None]] = {}
        self._literal: dict[tuple[str, str], str | None] = {}  # (scheme, host) -> refusal
        self._origins: dict[str, None] = {}  # scheme://netloc of allowed direct requests

    async def check(self, url: httpx.URL) -> None:
        """Raise ``AddressRefusedError`` if the request to ``url`` may not be sent."""
        await self.check_parts(url.scheme, url.host, url.query.decode("ascii", "replace"), url)

    def passes_direct(self, url: str) -> bool:
        """True when ``url`` is a direct request to an origin the policy let through before
        (a dictionary look-up: no parsing per request); False when ``check_url`` must judge
        it (first request to the origin, a relay, a refusal: it then raises)."""
        if self.relay != "direct" or self.gateway_refusal is not None:
            return False
        start = url.find("//") + 2
        end = len(url)
        for separator in "/?#":
            found = url.find(separator, start, end)
            if found >= 0:
                end = found
        return self._origins.get(url[:end], "") is None

    async def check_url(self, url: str) -> None:
        """``check`` for a URL as text (the aiohttp client's requests)."""
        parts = urlsplit(url)
        await self.check_parts(parts.scheme, parts.hostname or "", parts.query, url)
        if self.relay == "direct":  # allowed (check_parts raises otherwise): remember it
            self._origins[f"{parts.scheme}://{parts.netloc}"] = None

    async def check_parts(self, scheme: str, host: str, query: str, url: object) -> None:
        if self.gateway_refusal is not None:
            raise AddressRefusedError(self.gateway_refusal)
        self._check_literal(scheme, host)
        if self.relay == "proxy":
            await self._check_relayed(scheme, host)
        elif self.relay == "api" and self.api_origin == _origin(str(url)):
            target = parse_qs(query).get("url")
            if target:
                parts = urlsplit(target[0])
                self._check_literal(parts.scheme, parts.hostname or "")
                await self._check_relayed(parts.scheme, parts.hostname or "")

    def _check_literal(self, scheme: str, host: str) -> None:
        key = (scheme, host)
        try:
            why = self._literal[key]
        except KeyError:  # judged once per host and client (parsing an address is not free)
            why = self._literal[key] = self.policy.scheme_refusal(
                scheme
            ) or self.policy.host_refusal(host)
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
            pending = asyncio.ensure_future(self._judge_target(host))
            self._targets[host] = pending
        why = await asyncio.shield(pending)
        if why is not None:
            raise AddressRefusedError(why)

    async def _judge_target(self, host: str) -> str | None:
        try:
            addresses = await _resolve(host, self.cache)
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
    policy: AddressPolicy,
    *,
    limits: httpx.Limits,
    proxy: httpx.Proxy | None = None,
    cache: DnsCache | None = None,
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
    pool._network_backend = PolicyNetworkBackend(policy, cache=cache)
    return transport


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"
