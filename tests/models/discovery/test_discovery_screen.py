"""Screening discovered URLs: traps, exact and Bloom de-duplication, caps; links; redaction."""

from __future__ import annotations

import pytest

from models.discovery.admission import (
    Candidate,
    HostCaps,
    pattern_multipliers,
    screen_candidates,
    url_pattern,
)
from models.discovery.links import links_from_html
from models.discovery.seen import BloomFilter, ExactSeenSet
from models.discovery.urls import url_id
from models.fetching.redaction import RedactionPolicy, redact_headers, redact_url

NOTHING = ExactSeenSet.of([])


def test_normalizes_deduplicates_and_keeps_the_first_source():
    found = screen_candidates(
        [
            Candidate("HTTP://A.test:80/x/./y?utm_source=z#top", "seed"),
            Candidate("http://a.test/x/y", "sitemap"),
            Candidate("http://a.test/x/y", "link"),
            Candidate("mailto:someone@a.test", "link"),
        ],
        known=NOTHING,
    )
    assert [(p.url, p.candidate.source) for p in found.new] == [("http://a.test/x/y", "seed")]
    assert found.duplicates == 2 and found.found == 4
    assert found.rejected.counts == {"bad_url": 1}


@pytest.mark.parametrize(
    "url, detail",
    [
        ("http://a.test/a/b/a/b/a/b", "repeated"),
        ("http://a.test/" + "/".join(f"d{i}" for i in range(20)), "deeper"),
        ("http://a.test/?q=" + "x" * 3000, "longer"),
    ],
)
def test_traps_are_rejected_with_the_rule(url, detail):
    found = screen_candidates([Candidate(url, "link")], known=NOTHING)
    assert not found.new and found.rejected.counts == {"trap": 1}
    assert detail in found.rejected.examples["trap"]


def test_catalog_pages_are_known_not_new():
    known = ExactSeenSet.of([url_id("http://a.test/old")])
    found = screen_candidates(
        [Candidate("http://a.test/old", "sitemap"), Candidate("http://a.test/new", "sitemap")],
        known=known,
    )
    assert [p.url for p in found.known] == ["http://a.test/old"]
    assert [p.url for p in found.new] == ["http://a.test/new"]


def test_bloom_filter_skips_links_settled_before_but_never_sitemap_entries():
    bloom = BloomFilter(10_000, 0.01)
    links = [Candidate(f"http://a.test/p/{i}", "link") for i in range(50)]
    trap = Candidate("http://a.test/x/x/x/x", "link")
    first = screen_candidates([*links, trap], known=NOTHING, seen_links=bloom)
    assert len(first.new) == 50 and first.rejected.counts == {"trap": 1}
    again = screen_candidates([*links, trap], known=NOTHING, seen_links=bloom)
    assert again.new == [] and again.seen_links == 51 and again.rejected.total == 0
    # the same URLs from a sitemap are checked exactly, never against the filter
    as_sitemap = [Candidate(c.url, "sitemap") for c in links]
    assert len(screen_candidates(as_sitemap, known=NOTHING, seen_links=bloom).new) == 50


def test_capped_links_are_not_marked_seen_and_come_back():
    bloom = BloomFilter(1_000, 0.01)
    links = [Candidate(f"http://a.test/p/{i}", "link") for i in range(10)]
    caps = HostCaps(floor=4, per_value=0.0)
    first = screen_candidates(links, known=NOTHING, seen_links=bloom, caps=caps)
    assert len(first.new) == 4 and first.rejected.counts == {"host_cap": 6}
    known = ExactSeenSet.of([p.url_id for p in first.new])
    second = screen_candidates(links, known=known, seen_links=bloom, caps=caps)
    assert len(second.new) == 4 and second.seen_links == 4


def test_host_caps_follow_host_importance_with_a_floor():
    links = [Candidate(f"http://{h}.test/p/{i}", "link") for h in ("big", "new") for i in range(50)]
    found = screen_candidates(
        links,
        known=NOTHING,
        host_value={"big.test": 4.0},
        caps=HostCaps(floor=5, per_value=10.0),
    )
    per_host = {h: sum(p.host == h for p in found.new) for h in ("big.test", "new.test")}
    assert per_host == {"big.test": 40, "new.test": 5}
    assert found.rejected.counts == {"host_cap": 55}


def test_max_pages_and_robots():
    found = screen_candidates(
        [Candidate(f"http://a.test/{p}/1", "link") for p in ("ok", "private", "ok2", "ok3")],
        known=NOTHING,
        max_pages=2,
        robots_denial=lambda url: "disallowed" if "/private/" in url else None,
    )
    assert [p.url for p in found.new] == ["http://a.test/ok/1", "http://a.test/ok2/1"]
    assert found.rejected.counts == {"robots_denied": 1, "max_pages": 1}


def test_unknown_source_is_an_error():
    with pytest.raises(ValueError, match="unknown discovery source"):
        screen_candidates([Candidate("http://a.test/", "rss")], known=NOTHING)


def test_url_patterns_and_duplicate_multipliers():
    assert url_pattern("http://127.0.1.1:80/cal/2026/01?day=3&view=m") == (
        "127.0.1.1:80/cal/N/N?day&view"
    )
    assert url_pattern("http://a.test/cal/2031/12?view=x&day=9") == "a.test/cal/N/N?day&view"
    urls = [f"http://a.test/print/{i}" for i in range(20)] + [
        f"http://a.test/p/{i}" for i in range(20)
    ]
    dup = [True] * 18 + [False] * 2 + [False] * 19 + [True]
    multipliers = pattern_multipliers([url_pattern(u) for u in urls], dup)
    assert multipliers["a.test/print/N"] == pytest.approx(max(0.1, 1 - 18 / 24))
    assert multipliers["a.test/p/N"] == pytest.approx(1 - 1 / 24)
    assert pattern_multipliers(["x"] * 3, [True] * 3) == {}  # too few reports


PAGE = b"""<!doctype html><html><head><base href="/dir/sub/">
<meta name="description" content="nofollow is not in a robots meta here"></head><body>
<a href="a?utm_source=x#f">a</a> <a href="../b">b</a> <a href="//other.test/c">c</a>
<a href="mailto:x@y.test">m</a> <a href="javascript:void(0)">j</a> <a href="#top">top</a>
<a rel="nofollow ugc" href="/calendar/next">next month</a> <area href="/area">
<a href="a">again</a> <a href=" HTTP://Example.COM:80/x/./y ">e</a></body></html>"""


def test_links_resolve_against_base_and_skip_nofollow():
    links = links_from_html("http://example.com/start/page.html", PAGE, "text/html")
    assert links == [
        "http://example.com/dir/sub/a",
        "http://example.com/dir/b",
        "http://other.test/c",
        "http://example.com/area",
        "http://example.com/x/y",
    ]
    followed = links_from_html("http://example.com/", PAGE, "text/html", follow_nofollow=True)
    assert "http://example.com/calendar/next" in followed


def test_links_honour_meta_robots_and_content_type():
    page = b'<meta name="robots" content="noindex, nofollow"><a href="/x">x</a>'
    assert links_from_html("http://a.test/", page, "text/html") == []
    assert links_from_html("http://a.test/", b'{"href": "/x"}', "application/json") == []
    page = "<a href='/caf\u00e9'>x</a>".encode("latin-1")
    assert links_from_html("http://a.test/", page, "text/html; charset=iso-8859-1") == [
        "http://a.test/caf%C3%A9"
    ]


def test_redaction_of_headers_and_urls():
    headers = [
        ("Authorization", "Bearer x"),
        ("cookie", "a=b"),
        ("X-Goog-Api-Key", "k"),
        ("X-Session-Id", "s"),
        ("Accept", "*/*"),
        ("If-None-Match", '"v1"'),
    ]
    assert redact_headers(headers) == [("Accept", "*/*"), ("If-None-Match", '"v1"')]
    assert redact_url("http://u:p@a.test/x?api_key=1&page=2&access_token=3&api%5Fkey=4") == (
        "http://a.test/x?page=2"
    )
    plain = "http://a.test/x?author=me&q=token+bucket"
    assert redact_url(plain) == plain  # nothing secret: unchanged byte for byte
    custom = RedactionPolicy(headers=frozenset({"x-tenant"}), params=frozenset(), name_pattern="")
    assert redact_headers([("X-Tenant", "t"), ("Authorization", "a")], custom) == [
        ("Authorization", "a")
    ]
    with pytest.raises(ValueError, match="bad secret name pattern"):
        RedactionPolicy(name_pattern="(")
