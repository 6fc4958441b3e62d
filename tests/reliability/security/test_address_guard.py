"""The address policy applied by the fetch engine and the sitemap reader (issue 8).

Every test runs under the ``loopback_only`` tripwire: a connection to any address outside
loopback would be recorded (and stopped before a packet left). An empty record is the proof
that the policy refused a request rather than the network. Host names resolve through
``fake_dns`` (``*.test``) or /etc/hosts (``localhost``): no DNS query leaves the machine.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import pytest

from models.discovery.urls import normalize, url_id
from sandbox import SANDBOX_NETWORKS, ScrapingApi
from tasks.discovery.sitemaps import (
    SitemapReader,
    SitemapSettings,
    SitemapSource,
    make_sitemap_client,
)
from tasks.fetch.engine import fetch_batch_sync
from tasks.fetch.settings import FetchSettings
from tests.reliability.hostile.figures import REFUSED
from tests.reliability.security.loopback import page, same_port, serve
from tests.tasks.fetch.conftest import sandbox

pytestmark = pytest.mark.reliability


def settings(**overrides: object) -> FetchSettings:
    base: dict[str, object] = {
        "min_delay_s": 0.0,
        "max_delay_s": 0.05,
        "request_timeout_s": 5.0,
        "robots_timeout_s": 2.0,
        "retry_base_s": 0.05,
        "retry_cap_s": 0.1,
        "seed": 3,
    }
    base.update(overrides)
    return FetchSettings(**base)  # type: ignore[arg-type]


def rows_of(result, urls):
    rows = {r["url_id"]: r for r in result.rows.to_pylist()}
    out = {}
    for url in urls:
        try:
            key = url_id(normalize(url))
        except ValueError:
            key = url_id(url.strip())
        out[url] = rows[key]
    return out


#: Reason keywords -> the class a refusal is counted under in the figures (first match).
CLASSES = (
    ("carries IPv4", "IPv6 form of a refused IPv4"),
    ("cloud metadata", "cloud metadata"),
    ("loopback", "loopback"),
    ("RFC 1918", "private"),
    ("unique local", "private"),
    ("link-local", "link-local"),
    ("multicast", "multicast"),
    ("carrier-grade", "shared (CGNAT)"),
    ("benchmarking", "reserved"),
    ("reserved", "reserved"),
    ("this network", "unspecified"),
    ("unspecified", "unspecified"),
    ("scheme", "scheme"),
)


def tally(rows) -> None:
    """Count refusals by class for the figures."""
    for row in rows:
        if row["outcome"] == "refused_address":
            reason = row["reason"]
            REFUSED[next((c for k, c in CLASSES if k in reason), "other")] += 1


LITERALS = [
    "http://127.0.0.1:9/",
    "http://127.1.2.3/",
    "http://[::1]:9/x",
    "http://10.0.0.1/admin",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://169.254.169.254/latest/meta-data/iam/",
    "http://[::ffff:127.0.0.1]:9/",
    "http://[::ffff:169.254.169.254]/",
    "http://100.64.0.1/",
    "http://224.0.0.1/",
    "http://0.0.0.0:9/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://198.18.0.1/",
    "http://[2002:7f00:1::]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "ftp://example.org/file",
    "file:///etc/passwd",
    "gopher://example.org/",
]


def test_the_default_refuses_every_non_public_literal_and_scheme(loopback_only):
    result = fetch_batch_sync(LITERALS, settings=settings())
    rows = rows_of(result, LITERALS)
    assert {u: r["outcome"] for u, r in rows.items()} == dict.fromkeys(LITERALS, "refused_address")
    assert "cloud metadata" in rows["http://169.254.169.254/latest/meta-data/iam/"]["reason"]
    assert "scheme 'file'" in rows["file:///etc/passwd"]["reason"]
    assert result.metrics.requests == 0 and result.metrics.robots_fetches == 0
    assert result.metrics.refused == len(LITERALS)
    assert loopback_only.blocked == []
    tally(rows.values())


def test_host_names_are_judged_after_resolution(loopback_only, fake_dns):
    fake_dns.add("metadata.test", ["169.254.169.254"])
    fake_dns.add("intranet.test", ["10.1.2.3"])
    fake_dns.add("mixed.test", ["127.0.0.2", "10.9.9.9"])  # one refused address refuses all
    fake_dns.add("v6.test", ["fd00::5"])
    with serve(address="127.0.0.2") as allowed:
        urls = [
            f"http://metadata.test:{allowed.port}/latest/meta-data/",
            f"http://intranet.test:{allowed.port}/",
            f"http://mixed.test:{allowed.port}/p",
            f"http://v6.test:{allowed.port}/p",
            f"http://localhost:{allowed.port}/p",  # /etc/hosts: loopback, not allowed here
        ]
        result = fetch_batch_sync(urls, settings=settings(allowed_networks=("127.0.0.2/32",)))
    rows = rows_of(result, urls)
    assert [r["outcome"] for r in rows.values()] == ["refused_address"] * len(urls)
    assert (
        "metadata.test resolves to 169.254.169.254 (link-local (cloud metadata service))"
        in (rows[urls[0]]["reason"])
    )
    assert "10.9.9.9" in rows[urls[2]]["reason"]
    assert "localhost resolves to" in rows[urls[4]]["reason"]
    assert allowed.requests == []  # not even robots.txt
    assert loopback_only.blocked == []
    tally(rows.values())


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_dns_rebinding_cannot_move_a_connection(loopback_only, fake_dns, transport):
    """The name answers an allowed address, then a refused one: nothing reaches the refused
    address. Both transports resolve through the engine's DNS cache: one lookup, judged,
    and every connection of the batch goes to that judged address."""
    fake_dns.add("rebind.test", ["127.0.0.2"], ["127.0.0.3"])
    with same_port("127.0.0.2", "127.0.0.3") as (good, evil):
        urls = [f"http://rebind.test:{good.port}/p/{i}" for i in range(3)]
        result = fetch_batch_sync(
            urls, settings=settings(allowed_networks=("127.0.0.2/32",), http_transport=transport)
        )
    rows = rows_of(result, urls)
    assert evil.requests == []
    assert "/robots.txt" in good.requests
    assert {r["outcome"] for r in rows.values()} == {"ok"}
    assert len(good.requests) == 1 + len(urls)
    assert fake_dns.lookups["rebind.test"] == 1
    assert loopback_only.blocked == []
    tally(rows.values())


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_dns_rebinding_after_the_cache_expires_is_judged_again(loopback_only, fake_dns, transport):
    """With a DNS TTL of 0 every new connection looks the name up again: the second answer
    (a refused address) is judged and refused, never connected to; a kept-alive connection
    stays on the address judged when it was made."""
    fake_dns.add("rebind.test", ["127.0.0.2"], ["127.0.0.3"])
    with same_port("127.0.0.2", "127.0.0.3") as (good, evil):
        urls = [f"http://rebind.test:{good.port}/p/{i}" for i in range(3)]
        result = fetch_batch_sync(
            urls,
            settings=settings(
                allowed_networks=("127.0.0.2/32",), http_transport=transport, dns_ttl_s=0.0
            ),
        )
    rows = rows_of(result, urls)
    assert evil.requests == []
    assert "/robots.txt" in good.requests
    assert {r["outcome"] for r in rows.values()} <= {"ok", "refused_address"}
    for url, row in rows.items():
        if row["outcome"] == "ok":  # served over the connection made to the judged address
            assert urlsplit(url).path in good.requests
        else:
            assert "127.0.0.3" in row["reason"], row["reason"]
    assert loopback_only.blocked == []
    tally(rows.values())


def test_redirects_are_judged_hop_by_hop(loopback_only):
    def answer(path: str):
        if path == "/to-file":
            return 302, {"Location": "file:///etc/passwd"}, b""
        if path == "/to-gopher":
            return 301, {"Location": "gopher://127.0.0.2/"}, b""
        return page(path)

    def robots_to_metadata(path: str):
        if path == "/robots.txt":
            return 301, {"Location": "http://169.254.169.254/robots.txt"}, b""
        return page(path)

    policy = ("127.0.0.2/32",)
    with serve(answer) as host, serve(robots_to_metadata) as other:
        urls = [host.base + "/to-file", host.base + "/to-gopher", host.base + "/fine"]
        urls.append(other.base + "/page")
        result = fetch_batch_sync(urls, settings=settings(allowed_networks=policy))
        pages = other.requests
    rows = rows_of(result, urls)
    assert rows[urls[0]]["outcome"] == "refused_address"
    assert "scheme 'file'" in rows[urls[0]]["reason"]
    assert rows[urls[1]]["outcome"] == "refused_address"
    assert rows[urls[2]]["outcome"] == "ok"
    # robots.txt redirected to the metadata service: refused, so robots.txt is unreachable
    # and the host's pages are not fetched (RFC 9309: disallow all).
    assert rows[urls[3]]["outcome"] == "robots_denied"
    assert "address refused" in rows[urls[3]]["reason"]
    assert pages == ["/robots.txt"]
    assert loopback_only.blocked == []
    tally(rows.values())


def test_sitemaps_and_their_redirects_are_judged(loopback_only, fake_dns):
    fake_dns.add("intranet.test", ["10.0.0.7"])

    def answer(path: str):
        if path == "/sitemap.xml":
            return 302, {"Location": "http://intranet.test/sitemap.xml"}, b""
        return page(path)

    with serve(answer) as host:
        sitemap_settings = SitemapSettings(allowed_networks=("127.0.0.2/32",), min_delay_s=0.0)
        sources = [
            SitemapSource(host.base + "/sitemap.xml"),
            SitemapSource("http://metadata.test/sitemap.xml"),
            SitemapSource("http://[::1]:9/sitemap.xml"),
        ]
        fake_dns.add("metadata.test", ["169.254.169.254"])

        async def read():
            async with make_sitemap_client(sitemap_settings) as client:
                return await SitemapReader(client, sitemap_settings).read(sources)

        report = asyncio.run(read())
    assert report.rejected.counts["refused_address"] == 3, dict(report.rejected.counts)
    assert report.sitemaps_read == 0
    assert host.requests == ["/robots.txt", "/sitemap.xml"]  # the redirect was not followed
    assert loopback_only.blocked == []
    REFUSED.update(["private", "cloud metadata", "loopback"])  # the three sitemaps


def test_through_a_proxy_or_api_the_target_and_the_gateway_are_judged(loopback_only, fake_dns):
    fake_dns.add("intranet.test", ["10.1.2.3"])
    fake_dns.add("public.test", ["93.184.216.34"])
    with sandbox(hosts=1, pages=2) as sb:
        page_url = sb.page_urls(0)[0]  # on 127.0.1.1: loopback, not the gateway's /32
        hidden = f"http://intranet.test:{sb.port}/p/0"
        gateway_only = ("127.0.0.1/32",)
        proxied = fetch_batch_sync(
            [page_url, hidden],
            settings=settings(mode="proxy", proxy_url=sb.proxy_url, allowed_networks=gateway_only),
        )
        via_api = fetch_batch_sync(
            [page_url, hidden],
            settings=settings(mode="api", api_url=sb.api_url, allowed_networks=gateway_only),
        )
        public = ["http://public.test/a", "http://public.test/b"]  # fine targets, but
        gateway_refused = fetch_batch_sync(  # the API itself is on loopback: refused
            public, settings=settings(mode="api", api_url=sb.api_url)
        )
        proxied_ok = fetch_batch_sync(
            sb.page_urls(0),
            settings=settings(
                mode="proxy", proxy_url=sb.proxy_url, allowed_networks=SANDBOX_NETWORKS
            ),
        )
        entries = sb.log.entries()
        api_requests = sb.api.stats().requests
    for result in (proxied, via_api):
        rows = rows_of(result, [page_url, hidden])
        assert [r["outcome"] for r in rows.values()] == ["refused_address"] * 2
        assert "127.0.1.1 is loopback" in rows[page_url]["reason"]
        assert "intranet.test resolves to 10.1.2.3" in rows[hidden]["reason"]
        tally(rows.values())
    gateway_rows = gateway_refused.rows.to_pylist()
    assert {r["outcome"] for r in gateway_rows} == {"refused_address"}
    assert all("gateway 127.0.0.1: 127.0.0.1 is loopback" in r["reason"] for r in gateway_rows)
    tally(gateway_rows)
    assert proxied_ok.metrics.outcomes == {"ok": 2}  # the allow-list opens the sandbox again
    assert api_requests == 0
    assert {e.via for e in entries} == {"proxy"} and len(entries) == 3  # robots + 2 pages
    assert loopback_only.blocked == []


def test_refusals_are_counted_in_the_metrics_not_logged_per_url(caplog, loopback_only):
    urls = [f"http://10.0.{i // 250}.{i % 250 + 1}/p" for i in range(300)]
    with caplog.at_level(logging.INFO):
        result = fetch_batch_sync(urls, settings=settings())
    assert result.metrics.refused == 300 and result.metrics.outcomes == {"refused_address": 300}
    assert "refused addresses 300" in result.metrics.summary()
    ours = [r for r in caplog.records if r.name.startswith(("tasks", "models"))]
    assert len(ours) <= 1, [r.getMessage() for r in ours]  # the batch summary, nothing per URL
    assert loopback_only.blocked == []


def test_an_api_key_is_sent_to_the_api_only_and_a_wrong_one_is_refused(loopback_only):
    with sandbox(hosts=1, pages=2, api=ScrapingApi(api_key="right-key")) as sb:
        common = {"mode": "api", "api_url": sb.api_url, "allowed_networks": SANDBOX_NETWORKS}
        good = fetch_batch_sync(sb.page_urls(0), settings=settings(api_key="right-key", **common))
        bad = fetch_batch_sync(sb.page_urls(0), settings=settings(api_key="wrong", **common))
        entries = sb.log.entries()
    assert good.metrics.outcomes == {"ok": 2}
    assert [(r["outcome"], r["status"]) for r in bad.rows.to_pylist()] == [("error", 401)] * 2
    assert all("x-api-key" not in e.headers for e in entries)  # never passed to the target


def test_the_tripwire_stops_a_connection_that_leaves_loopback(loopback_only):
    """The safety net under these tests works: a connection outside loopback never starts."""

    async def connect() -> None:
        await asyncio.open_connection("192.0.2.1", 80)  # TEST-NET-1, and refused here anyway

    with pytest.raises(OSError):
        asyncio.run(connect())
    assert loopback_only.blocked == ["('192.0.2.1', 80)"]
    loopback_only.blocked.clear()
