"""Sitemap parsing: fields, the protocol's limits, hostile files, and the scope rules."""

from __future__ import annotations

import gzip
import inspect
from datetime import UTC, datetime, timedelta, timezone

import pytest

from models.discovery.sitemap import (
    CHANGEFREQ_RATES,
    MAX_BYTES,
    MAX_URLS,
    BoundedGunzip,
    SitemapParser,
    SitemapRejectedError,
    SitemapScope,
    parse_lastmod,
    parse_sitemap,
)

pytestmark = pytest.mark.numerics_free

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*urls: str, ns: str = NS) -> bytes:
    body = "".join(f"<url><loc>{u}</loc></url>" for u in urls)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {ns}>{body}</urlset>'.encode()


def test_fields_are_read_and_kept():
    doc = f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
  <url>
    <loc> http://a.test/p/1 </loc>
    <lastmod>2026-01-02T03:04:05+02:00</lastmod>
    <changefreq>Daily</changefreq>
    <priority>0.8</priority>
    <image:image><image:loc>http://cdn.test/x.jpg</image:loc></image:image>
  </url>
  <url><loc>http://a.test/p/2?a=1&amp;b=2</loc><lastmod>2026-01</lastmod></url>
  <url><loc>http://a.test/p/3</loc><lastmod>last week</lastmod><changefreq>often</changefreq>
       <priority>7</priority></url>
  <url><lastmod>2026-01-01</lastmod></url>
</urlset>""".encode()
    parsed = parse_sitemap(doc)
    assert parsed.kind == "urlset" and not parsed.is_index
    first, second, third = parsed.entries
    assert first.loc == "http://a.test/p/1"  # the image's loc is not the page's
    assert first.lastmod == datetime(2026, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert first.changefreq == "daily" and first.priority == 0.8
    assert second.loc == "http://a.test/p/2?a=1&b=2"
    assert second.lastmod == datetime(2026, 1, 1, tzinfo=UTC)
    assert (third.lastmod, third.changefreq, third.priority) == (None, None, None)
    assert parsed.bad_fields == 4  # three bad values in p/3 and one entry without <loc>


def test_index_and_files_without_namespace():
    index = parse_sitemap(
        b"<sitemapindex><sitemap><loc>http://a.test/s/1.xml.gz</loc>"
        b"<lastmod>2026-01-01</lastmod></sitemap></sitemapindex>"
    )
    assert index.is_index and index.entries[0].loc == "http://a.test/s/1.xml.gz"
    assert parse_sitemap(urlset("http://a.test/", ns="")).entries[0].loc == "http://a.test/"


def test_gzip_files_and_multiple_members():
    data = gzip.compress(urlset("http://a.test/1", "http://a.test/2"))
    assert len(parse_sitemap(data).entries) == 2
    text = urlset("http://a.test/1")
    split = gzip.compress(text[:40]) + gzip.compress(text[40:])  # concatenated members
    assert parse_sitemap(split, chunk=7).entries[0].loc == "http://a.test/1"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-03", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-04", datetime(2026, 3, 4, tzinfo=UTC)),
        ("2026-03-04T05:06Z", datetime(2026, 3, 4, 5, 6, tzinfo=UTC)),
        ("2026-03-04T05:06:07.25-05:00", datetime(2026, 3, 4, 10, 6, 7, 250000, tzinfo=UTC)),
        ("2026-03-04T05:06:07", datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)),
        ("2026-13-01", None),
        ("yesterday", None),
        ("", None),
    ],
)
def test_w3c_datetimes(text, expected):
    assert parse_lastmod(text) == expected


def test_lastmod_keeps_the_instant():
    value = parse_lastmod("2026-03-04T23:30:00+09:30")
    assert value == datetime(2026, 3, 4, 23, 30, tzinfo=timezone(timedelta(hours=9, minutes=30)))


def test_changefreq_priors_are_ordered():
    order = ["always", "hourly", "daily", "weekly", "monthly", "yearly", "never"]
    rates = [CHANGEFREQ_RATES[k] for k in order]
    assert rates == sorted(rates, reverse=True)


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<urlset><url><loc>http://a.test/&lol3;</loc></url></urlset>"""
EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE urlset SYSTEM "http://127.0.0.1:9/evil.dtd">
<urlset><url><loc>http://a.test/&ext;</loc></url></urlset>"""


@pytest.mark.parametrize(
    "data, reason",
    [
        (BILLION_LAUGHS, "xml_entities"),
        (EXTERNAL_ENTITY, "xml_entities"),
        (gzip.compress(BILLION_LAUGHS), "xml_entities"),
        (b"<urlset><url><loc>http://a.test/</loc></url>", "invalid_xml"),
        (b"<urlset><url><loc>http://a.test/&nbsp;</loc></url></urlset>", "invalid_xml"),
        (b"", "invalid_xml"),
        (b"<html><body>Sitemap</body></html>", "not_a_sitemap"),
        (b"\x1f\x8b\x08\x00garbage-not-deflate", "bad_gzip"),
        (gzip.compress(urlset("http://a.test/"))[:-12], "bad_gzip"),
    ],
)
def test_hostile_or_broken_files_are_rejected_with_a_reason(data, reason):
    with pytest.raises(SitemapRejectedError) as info:
        parse_sitemap(data)
    assert info.value.reason == reason
    assert str(info.value).startswith(reason + ": ")


def test_the_50000_url_limit():
    urls = [f"http://a.test/p/{i}" for i in range(MAX_URLS)]
    assert len(parse_sitemap(urlset(*urls)).entries) == MAX_URLS
    with pytest.raises(SitemapRejectedError, match="more than 50,000 entries") as info:
        parse_sitemap(urlset(*urls, "http://a.test/one-too-many"))
    assert info.value.reason == "too_many_urls"


def test_the_50_mb_limit_counts_uncompressed_bytes():
    # The limit is 50 MB by default; the counting is checked at a small limit (parsing a
    # 50 MB comment twice took 10 s of CPU), fed in many pieces so the count spans feeds.
    assert MAX_BYTES == 52_428_800
    for default in (
        inspect.signature(parse_sitemap).parameters["max_bytes"].default,
        inspect.signature(SitemapParser).parameters["max_bytes"].default,
    ):
        assert default == MAX_BYTES
    limit, chunk = 64 * 1024, 4096
    padding = b"<!--" + b" " * (limit - 200) + b"-->"
    fits = urlset("http://a.test/").replace(b"<url>", padding + b"<url>", 1)
    assert limit - 100 < len(fits) <= limit
    assert len(parse_sitemap(fits, max_bytes=limit, chunk=chunk).entries) == 1
    # gzip: its compressed size (a few hundred bytes) is not what counts
    assert len(parse_sitemap(gzip.compress(fits), max_bytes=limit, chunk=chunk).entries) == 1
    over = fits.replace(b"<url>", b" " * 300 + b"<url>", 1)
    with pytest.raises(SitemapRejectedError) as info:
        parse_sitemap(over, max_bytes=limit, chunk=chunk)
    assert info.value.reason == "too_large"
    packed = gzip.compress(over)
    assert len(packed) < limit // 10
    with pytest.raises(SitemapRejectedError) as info:
        parse_sitemap(packed, max_bytes=limit, chunk=chunk)
    assert info.value.reason == "gzip_bomb"  # stopped while inflating, at the same limit


def test_a_gzip_bomb_is_stopped_at_the_limit_not_inflated():
    bomb = gzip.compress(b"<urlset>" + b" " * (60 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 100_000  # 60 MB of XML in about 60 KB
    gunzip = BoundedGunzip()
    with pytest.raises(SitemapRejectedError) as info:
        for start in range(0, len(bomb), 65536):
            gunzip.feed(bomb[start : start + 65536])
    assert info.value.reason == "gzip_bomb"
    assert gunzip.produced <= MAX_BYTES + 1  # never more than the limit plus one byte
    with pytest.raises(SitemapRejectedError, match="expands beyond 52,428,800 bytes"):
        parse_sitemap(bomb)


def test_scope_same_host_directory_and_robots_authority():
    scope = SitemapScope.of("http://a.test/catalog/sitemap.xml")
    assert scope.reason_outside("http://a.test/catalog/p/1") is None
    assert scope.reason_outside("http://a.test/images/1") == "outside_path"
    assert scope.reason_outside("https://a.test/catalog/p/1") == "cross_host"  # protocol
    assert scope.reason_outside("http://a.test:8080/catalog/p/1") == "cross_host"  # port
    assert scope.reason_outside("http://b.test/catalog/p/1") == "cross_host"
    # Cross submit: b.test's robots.txt names this sitemap, so b.test's URLs may be listed.
    shared = SitemapScope.of("http://a.test/catalog/sitemap.xml", ("http://b.test",))
    assert shared.reason_outside("http://b.test/anything") is None
    assert shared.reason_outside("http://c.test/anything") == "cross_host"
    # A child of an index at the root inherits the index's reach on that host.
    child = SitemapScope.of(
        "http://a.test/sitemaps/0.xml.gz", inherited=SitemapScope.of("http://a.test/sitemap.xml")
    )
    assert child.reason_outside("http://a.test/p/1") is None
    assert (
        SitemapScope.of("http://a.test/sitemaps/0.xml.gz").reason_outside("http://a.test/p/1")
        == "outside_path"
    )
