"""Fuzz: sitemap parsing (``models.discovery.sitemap``) on random, mutated, truncated and hostile
input.

Random bytes; valid sitemaps and indexes (namespaced or not, odd dates, priorities,
change frequencies, CDATA, comments, other encodings) mutated byte by byte; gzip files cut
short or corrupted; entity-expansion payloads ("billion laughs" of random depth and width,
external and parameter entities, DTDs behind comments, in UTF-16, gzipped). Properties:
the only exception is ``SitemapRejectedError`` with one of the documented reasons; a parsed
sitemap never holds more than ``max_urls`` entries and every field is within its type
(``lastmod`` an aware UTC time, ``priority`` in [0, 1], ``changefreq`` a known word); junk is
rejected, never half-parsed; an entity declaration is always refused. ``parse_lastmod`` and
``SitemapScope`` take any text.
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import pytest
from hypothesis import strategies as st

from models.discovery.sitemap import (
    CHANGEFREQ_RATES,
    SITEMAP_NS,
    SitemapRejectedError,
    SitemapScope,
    parse_lastmod,
    parse_sitemap,
)
from tests.reliability.fuzz.budget import BUDGETS, check
from tests.reliability.fuzz.mutate import mutated

pytestmark = pytest.mark.reliability

REASONS = {
    "xml_entities",
    "invalid_xml",
    "not_a_sitemap",
    "too_many_urls",
    "too_large",
    "gzip_bomb",
    "bad_gzip",
}
_DATES = st.one_of(
    st.datetimes(timezones=st.sampled_from([UTC, None])).map(lambda d: d.isoformat()),
    st.sampled_from(
        [
            "2026-01-01",
            "2026-01",
            "2026",
            "2026-01-01T10:00Z",
            "2026-01-01T10:00:00.123456789+05:30",
            "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
            "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
            "0000-00-00",
            "2026-02-30",
            "2026-01-01T25:00",
            "yesterday",
            "",
        ]
    ),
    st.text(max_size=30),
)
# Text a well-formed file may hold in any of the encodings used below (Latin-1, no controls).
_XML_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
    max_size=20,
).filter(lambda t: not any(0x80 <= ord(c) <= 0x9F for c in t))
_FIELD_TEXT = st.one_of(
    _XML_TEXT,
    st.sampled_from(["0.5", "1", "1.5", "-0", "nan", "inf", "1e-300", "daily", "ALWAYS", "never"]),
)
_XML_DATES = st.one_of(_DATES.filter(lambda t: t.isascii() and t.isprintable()), _XML_TEXT)


@st.composite
def sitemaps(draw: st.DrawFn) -> bytes:
    """A well-formed sitemap or index: some entries odd, the namespace sometimes missing."""
    index = draw(st.booleans())
    root, item = ("sitemapindex", "sitemap") if index else ("urlset", "url")
    ns = f' xmlns="{SITEMAP_NS}"' if draw(st.booleans()) else ""
    entries = []
    for n in range(draw(st.integers(0, 12))):
        fields = [f"<loc>https://shop.example/p/{n}?a=1&amp;b=2</loc>"]
        if draw(st.booleans()):
            fields.append(f"<lastmod>{_escape(draw(_XML_DATES))}</lastmod>")
        if draw(st.booleans()):
            fields.append(f"<changefreq>{_escape(draw(_FIELD_TEXT))}</changefreq>")
        if draw(st.booleans()):
            fields.append(f"<priority>{_escape(draw(_FIELD_TEXT))}</priority>")
        if draw(st.booleans()):
            fields.append("<!-- c --><extra><![CDATA[<x>]]></extra>")
        entries.append(f"<{item}>{''.join(fields)}</{item}>")
    body = f"<{root}{ns}>{''.join(entries)}</{root}>"
    encoding = draw(st.sampled_from(["utf-8", "utf-16", "iso-8859-1"]))
    head = f'<?xml version="1.0" encoding="{encoding}"?>\n' if draw(st.booleans()) else ""
    if not head:
        encoding = "utf-8"
    return (head + body).encode(encoding)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;")


_VALID = [
    b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    b"<url><loc>https://shop.example/p/1</loc><lastmod>2026-01-01</lastmod>"
    b"<changefreq>daily</changefreq><priority>0.8</priority></url>"
    b"<url><loc>https://shop.example/p/2</loc></url></urlset>",
    b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap>'
    b"<loc>https://shop.example/s/1.xml.gz</loc><lastmod>2026-01-01T10:00:00+00:00</lastmod>"
    b"</sitemap></sitemapindex>",
]


@st.composite
def entity_bombs(draw: st.DrawFn) -> bytes:
    """Entity expansion and external entities, in the shapes attacks take."""
    depth, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    decls = ['<!ENTITY e0 "lol">']
    decls += [
        f'<!ENTITY e{d} "{f"&e{d - 1};" * width}">' for d in range(1, depth + 1)
    ]  # width ** depth copies if expanded
    decls += draw(
        st.lists(
            st.sampled_from(
                [
                    '<!ENTITY ext SYSTEM "file:///etc/passwd">',
                    '<!ENTITY % p SYSTEM "http://127.0.0.1/evil.dtd"> %p;',
                    "<!ENTITY % q \"<!ENTITY r 'x'>\"> %q;",
                    "<!ELEMENT urlset ANY>",
                ]
            ),
            max_size=3,
        )
    )
    prolog = draw(st.sampled_from(["", '<?xml version="1.0"?>', "<!-- hi -->", "<?pi x?>"]))
    root = draw(st.sampled_from(["urlset", "sitemapindex", "lolz"]))
    ref = draw(st.sampled_from([f"&e{depth};", "&ext;", "&undeclared;", ""]))
    doc = (
        f"{prolog}<!DOCTYPE {root} [{''.join(decls)}]>"
        f'<{root} xmlns="{SITEMAP_NS}"><url><loc>{ref}</loc></url></{root}>'
    )
    data = doc.encode(draw(st.sampled_from(["utf-8", "utf-16"])))
    if draw(st.booleans()):
        data = gzip.compress(data)
    return data


def _check_parsed(data: bytes, max_urls: int, max_bytes: int) -> None:
    try:
        parsed = parse_sitemap(data, max_urls=max_urls, max_bytes=max_bytes)
    except SitemapRejectedError as exc:
        assert exc.reason in REASONS and exc.detail
        return
    assert parsed.kind in ("urlset", "sitemapindex")
    assert len(parsed.entries) <= max_urls
    assert parsed.bad_fields >= 0
    for entry in parsed.entries:
        assert isinstance(entry.loc, str) and entry.loc
        if entry.lastmod is not None:
            assert (
                entry.lastmod.tzinfo is not None and entry.lastmod.utcoffset().total_seconds() == 0
            )
        assert entry.priority is None or 0.0 <= entry.priority <= 1.0
        assert entry.changefreq is None or entry.changefreq in CHANGEFREQ_RATES


def _sitemap_property(data: bytes, max_urls: int) -> None:
    _check_parsed(data, max_urls, 1 << 20)


#: Times the fuzzer found failing (``test_fuzz_findings``): outside years 1-9999 in UTC.
LASTMOD_FINDINGS = [
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "0001-01-01T00:00+01:00",
]
SITEMAP_FINDINGS = [
    (
        f"<urlset><url><loc>https://s.example/a</loc><lastmod>{text}</lastmod></url></urlset>"
    ).encode()
    for text in LASTMOD_FINDINGS
]


@pytest.mark.parametrize("budget", BUDGETS)
def test_any_bytes_parse_or_are_rejected_with_a_documented_reason(budget):
    documents = st.one_of(
        st.binary(max_size=400),
        sitemaps(),
        mutated(_VALID),
        sitemaps().map(gzip.compress),
        st.binary(max_size=200).map(lambda b: b"\x1f\x8b" + b),
    )
    check(
        "sitemap.parse_any_bytes",
        500 * budget,
        _sitemap_property,
        [{"data": data, "max_urls": 5} for data in SITEMAP_FINDINGS],
        data=documents,
        max_urls=st.integers(1, 20),
    )


def _valid_property(data: bytes, max_urls: int) -> None:
    entries = data.count("<loc>".encode("utf-16")[2:]) + data.count(b"<loc>")
    try:
        parsed = parse_sitemap(data, max_urls=max_urls)
    except SitemapRejectedError as exc:  # a well-formed file is refused only for its size
        assert exc.reason == "too_many_urls" and entries > max_urls, exc
        return
    assert len(parsed.entries) == entries <= max_urls
    _check_parsed(data, max_urls, 1 << 20)


@pytest.mark.parametrize("budget", BUDGETS)
def test_valid_sitemaps_parse_within_the_url_bound(budget):
    check(
        "sitemap.valid_within_bound",
        200 * budget,
        _valid_property,
        [{"data": data, "max_urls": 5} for data in SITEMAP_FINDINGS],
        data=sitemaps(),
        max_urls=st.integers(1, 15),
    )


def _truncated_property(data: bytes, cut: int) -> None:
    packed = gzip.compress(data)
    cut = cut % len(packed)  # always drops at least the last byte
    try:
        parse_sitemap(packed[:cut])
    except SitemapRejectedError as exc:
        assert exc.reason in ("bad_gzip", "invalid_xml"), exc
        return
    raise AssertionError(f"a gzip file cut at {cut} of {len(packed)} bytes was accepted")


@pytest.mark.parametrize("budget", BUDGETS)
def test_truncated_gzip_is_rejected(budget):
    check(
        "sitemap.truncated_gzip",
        150 * budget,
        _truncated_property,
        data=sitemaps(),
        cut=st.integers(0, 10**6),
    )


def _bomb_property(data: bytes) -> None:
    try:
        parse_sitemap(data)
    except SitemapRejectedError as exc:
        assert exc.reason in ("xml_entities", "invalid_xml"), exc
        return
    raise AssertionError("a document with a DTD was parsed")


@pytest.mark.parametrize("budget", BUDGETS)
def test_entity_expansion_is_refused_before_it_starts(budget):
    check("sitemap.entity_bombs", 200 * budget, _bomb_property, data=entity_bombs())


def _many_urls_property(count: int, max_urls: int, gzipped: bool) -> None:
    entries = "".join(f"<url><loc>https://s.example/{n}</loc></url>" for n in range(count))
    data = f"<urlset>{entries}</urlset>".encode()
    if gzipped:
        data = gzip.compress(data)
    try:
        parsed = parse_sitemap(data, max_urls=max_urls)
    except SitemapRejectedError as exc:
        assert exc.reason == "too_many_urls" and count > max_urls
        return
    assert len(parsed.entries) == count <= max_urls


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_url_count_is_bounded(budget):
    check(
        "sitemap.url_bound",
        100 * budget,
        _many_urls_property,
        count=st.integers(0, 3_000),
        max_urls=st.integers(1, 2_000),
        gzipped=st.booleans(),
    )


def _lastmod_property(text: str) -> None:
    value = parse_lastmod(text)
    assert value is None or (isinstance(value, datetime) and value.tzinfo is not None)


def _scope_property(sitemap_url: str, url: str) -> None:
    scope = SitemapScope.of(sitemap_url, (sitemap_url,))
    assert scope.reason_outside(url) in (None, "outside_path", "cross_host")


@pytest.mark.parametrize("budget", BUDGETS)
def test_lastmod_and_scope_accept_any_text(budget):
    findings = [{"text": text} for text in LASTMOD_FINDINGS]
    check("sitemap.parse_lastmod", 500 * budget, _lastmod_property, findings, text=_DATES)
    urlish = st.text(st.sampled_from("htps:/.examplcom?#@ÉΩ8"), max_size=40)
    check("sitemap.scope", 300 * budget, _scope_property, sitemap_url=urlish, url=urlish)
