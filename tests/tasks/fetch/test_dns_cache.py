"""The DNS cache near the fetchers: one lookup per host per TTL, judged on every use.

The cache (``tasks.fetch.net_guard.DnsCache``) is the address policy's single resolution:
the resolver of either transport takes its addresses from it, judges every one, and the
connection goes to exactly those. Lookups here are fakes (no DNS query leaves the process)
and the clock is a counter, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from models.fetching.net_policy import AddressPolicy
from tasks.fetch.engine import EngineState, fetch_batch_sync
from tasks.fetch.net_guard import (
    AddressRefusedError,
    DnsCache,
    PolicyNetworkBackend,
    PolicyResolver,
)
from tests.reliability.security.loopback import same_port, serve
from tests.tasks.fetch.conftest import quick_settings


class FakeLookup:
    """Answers per name, one list per lookup (the last repeats); counts lookups."""

    def __init__(self, **answers: list[list[str]]) -> None:
        self.answers = {name.replace("_", "."): list(a) for name, a in answers.items()}
        self.calls: dict[str, int] = {}
        self.gate: asyncio.Event | None = None  # when set, lookups wait for it

    async def __call__(self, host: str) -> list[str]:
        count = self.calls.get(host, 0)
        self.calls[host] = count + 1
        if self.gate is not None:
            await self.gate.wait()
        answers = self.answers.get(host)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[min(count, len(answers) - 1)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


LOOPBACK = AddressPolicy.from_strings(["127.0.0.0/8"])


def test_one_lookup_per_host_per_ttl():
    lookup, clock = FakeLookup(a_test=[["127.0.0.2"]], b_test=[["127.0.0.3"]]), Clock()
    cache = DnsCache(60.0, lookup=lookup, clock=clock)

    async def scenario() -> None:
        for _ in range(5):
            assert await cache.addresses("a.test") == ["127.0.0.2"]
            assert await cache.addresses("b.test") == ["127.0.0.3"]
        clock.now += 59.9  # still within the TTL
        await cache.addresses("a.test")
        assert lookup.calls == {"a.test": 1, "b.test": 1}
        clock.now += 0.1  # the entry expires exactly ttl_s after its lookup
        await cache.addresses("a.test")
        assert lookup.calls == {"a.test": 2, "b.test": 1}

    asyncio.run(scenario())
    assert cache.lookups == 3


def test_concurrent_misses_share_one_lookup():
    lookup = FakeLookup(a_test=[["127.0.0.2"]])
    cache = DnsCache(60.0, lookup=lookup, clock=Clock())

    async def scenario() -> list[list[str]]:
        lookup.gate = asyncio.Event()
        waiting = [asyncio.ensure_future(cache.addresses("a.test")) for _ in range(10)]
        await asyncio.sleep(0)
        lookup.gate.set()
        return await asyncio.gather(*waiting)

    assert asyncio.run(scenario()) == [["127.0.0.2"]] * 10
    assert lookup.calls == {"a.test": 1}


def test_a_failed_lookup_is_kept_for_the_negative_ttl():
    lookup, clock = FakeLookup(), Clock()
    cache = DnsCache(60.0, negative_ttl_s=5.0, lookup=lookup, clock=clock)

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(OSError, match=r"cannot resolve 'gone\.test'"):
                await cache.addresses("gone.test")
        clock.now += 5.0
        with pytest.raises(OSError):
            await cache.addresses("gone.test")

    asyncio.run(scenario())
    assert lookup.calls == {"gone.test": 2}


def test_cached_addresses_are_judged_on_every_use():
    """A cache shared by clients of different policies: each judges what it is handed."""
    lookup = FakeLookup(a_test=[["10.0.0.7"]])
    cache = DnsCache(60.0, lookup=lookup, clock=Clock())
    open_one = AddressPolicy.from_strings(["10.0.0.0/8"])

    async def scenario() -> None:
        assert await cache.judged("a.test", open_one) == ["10.0.0.7"]
        with pytest.raises(AddressRefusedError, match=r"a\.test resolves to 10\.0\.0\.7 \(private"):
            await cache.judged("a.test", LOOPBACK)
        resolver = PolicyResolver(LOOPBACK, cache)
        with pytest.raises(AddressRefusedError):
            await resolver.resolve("a.test", 80)

    asyncio.run(scenario())
    assert lookup.calls == {"a.test": 1}


def test_the_resolver_hands_over_exactly_the_judged_addresses():
    lookup = FakeLookup(a_test=[["127.0.0.2", "::1", "127.0.0.2"]])
    cache = DnsCache(60.0, lookup=lookup, clock=Clock())
    policy = AddressPolicy.from_strings(["127.0.0.0/8", "::1/128"])

    async def scenario() -> tuple[list, list]:
        resolver = PolicyResolver(policy, cache)
        both = await resolver.resolve("a.test", 8080, socket.AF_UNSPEC)
        v4 = await resolver.resolve("a.test", 8080, socket.AF_INET)
        return both, v4

    both, v4 = asyncio.run(scenario())
    assert [(r["host"], r["port"], r["family"]) for r in both] == [
        ("127.0.0.2", 8080, socket.AF_INET),
        ("::1", 8080, socket.AF_INET6),
    ]
    assert [r["host"] for r in v4] == ["127.0.0.2"]
    assert all(r["hostname"] == "a.test" for r in both)


def test_the_httpx_backend_connects_only_to_judged_addresses():
    """A name that rebinds to a refused address after the TTL: refused before connecting."""
    lookup, clock = FakeLookup(a_test=[["127.0.0.2"], ["169.254.169.254"]]), Clock()
    cache = DnsCache(60.0, lookup=lookup, clock=clock)
    connected: list[str] = []

    class Recording:
        async def connect_tcp(self, host, port, timeout=None, local_address=None, options=None):
            connected.append(host)
            return object()

    backend = PolicyNetworkBackend(LOOPBACK, Recording(), cache)  # type: ignore[arg-type]

    async def scenario() -> None:
        await backend.connect_tcp("a.test", 80)
        await backend.connect_tcp("a.test", 80)
        clock.now += 60.0
        with pytest.raises(AddressRefusedError, match="cloud metadata"):
            await backend.connect_tcp("a.test", 80)

    asyncio.run(scenario())
    assert connected == ["127.0.0.2", "127.0.0.2"]
    assert lookup.calls == {"a.test": 2}


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_consecutive_batches_of_one_state_look_a_host_up_once(transport):
    """Two batches sharing an EngineState, each with a fresh client: one lookup in all."""
    with serve(address="127.0.0.2") as site:
        lookup = FakeLookup(site_test=[["127.0.0.2"]])
        settings = quick_settings(http_transport=transport, dns_ttl_s=300.0)
        state = EngineState(settings)
        state.dns = DnsCache(settings.dns_ttl_s, lookup=lookup, clock=Clock())
        rows = []
        for batch in range(2):
            urls = [f"http://site.test:{site.port}/b{batch}/p{i}" for i in range(3)]
            result = fetch_batch_sync(urls, settings=settings, state=state)
            rows += result.rows.to_pylist()
    assert [r["outcome"] for r in rows] == ["ok"] * 6, [r["reason"] for r in rows]
    assert lookup.calls == {"site.test": 1}
    assert len(site.requests) == 1 + 6  # robots.txt once (cached by the state), six pages


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_refused_address_in_the_cache_is_never_connected_to(transport):
    """The cached answer names an allowed and a refused address: the host is refused, and
    neither server sees a request, batch after batch, with no new lookup."""
    with same_port("127.0.0.2", "127.0.0.3") as (allowed, refused):
        lookup = FakeLookup(mixed_test=[["127.0.0.2", "127.0.0.3"]])
        settings = quick_settings(
            http_transport=transport, allowed_networks=("127.0.0.2/32",), dns_ttl_s=300.0
        )
        state = EngineState(settings)
        state.dns = DnsCache(settings.dns_ttl_s, lookup=lookup, clock=Clock())
        rows = []
        for _ in range(2):
            url = f"http://mixed.test:{allowed.port}/p"
            rows += fetch_batch_sync([url], settings=settings, state=state).rows.to_pylist()
    assert [r["outcome"] for r in rows] == ["refused_address"] * 2
    assert all("127.0.0.3" in r["reason"] for r in rows), rows
    assert allowed.requests == [] and refused.requests == []
    assert lookup.calls == {"mixed.test": 1}
