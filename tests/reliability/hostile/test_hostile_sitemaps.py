"""Sitemap discovery against hostile servers on loopback (issue 8).

One read of several sitemaps, each from its own host: XML entity expansion, three million
URLs streamed, a gzip bomb, a malformed answer, an address the policy refuses, and a healthy
one; and a slow drip on its own (it takes the whole time limit).
Each bad sitemap is rejected with its own reason, in bounded time and memory, and the
healthy sitemap's URLs all arrive.
"""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc

import pytest

from tasks.discovery.sitemaps import (
    SitemapReader,
    SitemapSettings,
    SitemapSource,
    make_sitemap_client,
)
from tests.reliability.hostile import servers as hs
from tests.reliability.hostile.figures import HOSTILE, MEMORY_PEAK

pytestmark = pytest.mark.reliability

#: behaviour -> (sitemap path, reason the whole sitemap is rejected with)
SITEMAPS = {
    "sitemap: billion laughs": ("/sitemap.xml", "xml_entities"),
    "sitemap: 3 million URLs": ("/sitemap.xml", "too_many_urls"),
    "gzip bomb": ("/sitemap.xml", "gzip_bomb"),
    "malformed status line": ("/sitemap.xml", "http_error"),
}
MEMORY_BOUND = 128 * 2**20  # a gzip bomb inflates to the 50 MB sitemap limit, then stops


@pytest.fixture(scope="module")
def servers():
    with hs.serve_hostile_process([*SITEMAPS, "slow drip", "sitemap: healthy"]) as running:
        yield running


def read_bounded(sources: list[SitemapSource], settings: SitemapSettings, limit_s: float = 90):
    box: dict[str, object] = {}

    async def read():
        async with make_sitemap_client(settings) as client:
            return await SitemapReader(client, settings).read(sources)

    def target() -> None:
        box["report"] = asyncio.run(read())

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"sitemap reading did not end within {limit_s} s"
    return box["report"]


def test_hostile_sitemaps_are_rejected_each_for_its_reason(servers, loopback_only):
    hostile = {name: servers.url(name) + path for name, (path, _) in SITEMAPS.items()}
    refused = "http://127.0.0.2:9/sitemap.xml"  # outside the allow-list: never contacted
    healthy = servers.url("sitemap: healthy") + "/sitemap.xml"
    sources = [SitemapSource(u) for u in [*hostile.values(), refused, healthy]]
    settings = SitemapSettings(
        allowed_networks=("127.0.0.1/32",), min_delay_s=0.0, timeout_s=20.0, max_depth=0
    )

    tracemalloc.start()
    started = time.monotonic()
    try:
        report = read_bounded(sources, settings)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    rejected = report.rejected
    for name in hostile:
        reason = SITEMAPS[name][1]
        assert rejected.counts[reason] >= 1, (name, dict(rejected.counts))
        HOSTILE[f"{name} (as a sitemap)"] = reason
    assert url_of(rejected.examples["xml_entities"]) == hostile["sitemap: billion laughs"]
    assert url_of(rejected.examples["too_many_urls"]) == hostile["sitemap: 3 million URLs"]
    assert url_of(rejected.examples["gzip_bomb"]) == hostile["gzip bomb"]
    assert rejected.counts["http_error"] == 1  # the malformed answer
    assert rejected.counts["refused_address"] == 1
    assert "127.0.0.2 is loopback" in rejected.examples["refused_address"]
    HOSTILE["sitemap on a refused address"] = "refused_address"

    # The healthy sitemap, read in the same run: all of its 20 URLs.
    found = {c.url for c in report.candidates}
    assert {f"{servers.url('sitemap: healthy')}/p/{i}" for i in range(20)} <= found
    assert len(found) == 20  # nothing from the 3-million sitemap leaked through
    assert report.sitemaps_read == 1

    MEMORY_PEAK["sitemap read, hostile sitemaps"] = peak
    assert peak < MEMORY_BOUND, f"peak {peak / 2**20:.0f} MiB"
    assert time.monotonic() - started < 60
    assert loopback_only.blocked == []


def test_a_slow_drip_sitemap_ends_at_its_time_limit(servers, loopback_only):
    url = servers.url("slow drip") + "/sitemap.xml"
    settings = SitemapSettings(allowed_networks=("127.0.0.1/32",), min_delay_s=0.0, timeout_s=1.0)
    started = time.monotonic()
    report = read_bounded([SitemapSource(url)], settings)
    assert time.monotonic() - started >= 1.0  # it waited its time limit, no less
    assert report.rejected.counts == {"http_error": 1}
    assert "no complete answer within 1 s" in report.rejected.examples["http_error"]
    HOSTILE["slow drip (as a sitemap)"] = "http_error"


def url_of(example: str) -> str:
    """The sitemap URL in a tally example ("sitemap <url>: <detail>")."""
    return example.removeprefix("sitemap ").split(": ", 1)[0]


def test_gunzip_inflates_large_members_in_steps_and_keeps_every_byte():
    """Inflating in 1 MiB steps (so a bomb never costs twice the limit) loses nothing,
    across members and whatever the chunking of the compressed stream."""
    import gzip

    from models.discovery.sitemap import BoundedGunzip

    text = b"<url><loc>https://example.org/p/1</loc></url>" * 60_000 + b"a" * 3_000_000
    data = gzip.compress(text) + gzip.compress(b"tail") + gzip.compress(b"b" * 2_500_000)
    want = text + b"tail" + b"b" * 2_500_000
    for step in (len(data), 65_536, 997):
        gunzip = BoundedGunzip()
        got = b"".join(gunzip.feed(data[i : i + step]) for i in range(0, len(data), step))
        gunzip.close()
        assert got == want, step
