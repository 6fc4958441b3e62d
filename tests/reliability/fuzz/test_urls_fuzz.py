"""Fuzz: URL normalization and reference resolution (``models.discovery.urls``) on hostile input.

Random Unicode (surrogates and controls included), URL-shaped strings built from hostile
parts (percent-escapes valid and not, IDN and invalid labels, IPv4/IPv6/IPvFuture literals,
ports of thousands of digits, dot segments, tracking parameters, controls and spaces at the
ends and inside). Properties: the only exception is ``InvalidURLError``; a normal form is
a fixed point; it parses back as an http(s) URL with a host and a valid port, by the
standard library and by httpx (the engine's client), in plain ASCII without spaces or
controls; ``url_id``, ``url_host``, ``canonical`` and ``url_trap_reason`` accept it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import strategies as st

from models.discovery.urls import (
    InvalidURLError,
    canonical,
    normalize,
    resolve,
    split_uri,
    url_host,
    url_id,
    url_trap_reason,
)
from tests.reliability.fuzz.budget import BUDGETS, check

pytestmark = pytest.mark.reliability

_ANY_CHAR = st.characters(codec=None, categories=None, exclude_categories=())
any_text = st.text(_ANY_CHAR, max_size=120)
_URL_PUNCT = list(":/?#[]@!$&'()*+,;=%-._~ \t\r\n\x00\x7f\"<>\\^`{|}")
_ESCAPE = st.one_of(
    st.integers(0, 255).map(lambda b: f"%{b:02x}"),
    st.integers(0, 255).map(lambda b: f"%{b:02X}"),
    st.sampled_from(["%", "%2", "%zz", "%%", "%u00e9", "%C3", "%E2%82", "%2e", "%2E%2e", "%00"]),
)
_PIECE = st.one_of(
    st.text(st.sampled_from([*_URL_PUNCT, *"azAZ09éüß€中😀\u200b\ufeff"]), max_size=8),
    _ESCAPE,
    st.sampled_from(["..", ".", "/..", "/./", "//", "utm_source=x", "gclid=1", ";jsessionid=A"]),
    any_text.map(lambda t: t[:6]),
)
junk = st.lists(_PIECE, max_size=8).map("".join)

_LABEL = st.one_of(
    st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9\-]{0,12}[A-Za-z0-9])?", fullmatch=True),
    st.text(st.sampled_from("abcüéßøçñжя中文ｅｘ。．"), min_size=1, max_size=8),
    st.sampled_from(
        ["xn--", "xn--9ca", "xn--zz-", "a" * 64, "-a", "a-", "_x", "", "%41", "%C3%A9"]
    ),
)
_HOST = st.one_of(
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
    st.tuples(*[st.integers(0, 300)] * 4).map(lambda t: ".".join(map(str, t))),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    st.sampled_from(
        [
            "[::1]",
            "[::1%25eth0]",
            "[::1%eth0]",
            "[fe80::1%251]",
            "[v1.abc]",
            "[V7.a:b]",
            "[v1. x]",
            "[vé.x]",
            "[v.]",
            "[::1",
            "::1]",
            "[]",
            "[1:2:3:4:5:6:7:8:9]",
            "[::ffff:127.0.0.1]",
            "a" * 300,
            "example.com.",
            "example..com",
            "%",
            "%zz",
            "ex%41mple.com",
            "%2e",
            " ",
        ]
    ),
    junk,
)
_PORT = st.one_of(
    st.none(),
    st.just(""),
    st.integers(0, 70_000).map(str),
    st.integers(0, 10**40).map(str),
    st.integers(4_000, 6_000).map(lambda n: "9" * n),  # past int()'s 4,300-digit limit
    st.integers(1, 5_000).map(lambda n: "0" * n + "80"),
    st.sampled_from(["-1", "+80", "8o", "80 ", "٨٠", "８０", "0x50", "1e3"]),
)
_SCHEME = st.sampled_from(["http", "https", "HTTP", "hTtPs", "ftp", "javascript", "", "h", "1a"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    """A URL-shaped string: every part may be valid, odd or broken."""
    scheme = draw(_SCHEME)
    userinfo = draw(st.one_of(st.none(), junk))
    host = draw(_HOST)
    port = draw(_PORT)
    url = f"{scheme}:" if scheme else ""
    if draw(st.booleans()) or scheme:
        url += "//"
    if userinfo is not None:
        url += f"{userinfo}@"
    url += host
    if port is not None:
        url += f":{port}"
    url += draw(st.sampled_from(["", "/", "/a/", "/a/b/../c"])) + draw(junk)
    if draw(st.booleans()):
        url += "?" + draw(junk)
    if draw(st.booleans()):
        url += "#" + draw(junk)
    edges = st.text(st.sampled_from(" \t\r\n\x00\x1f\x0b\x0c"), max_size=3)
    return draw(edges) + url + draw(edges)


any_url = st.one_of(urls(), any_text, junk)


def _assert_normal_form(normal: str) -> None:
    assert normalize(normal) == normal, "normalization is not idempotent"
    assert normal.isascii() and normal.isprintable() and " " not in normal, normal
    parts = split_uri(normal)
    assert parts.scheme in ("http", "https") and parts.authority and parts.fragment is None
    split = urlsplit(normal)
    assert split.hostname and (split.port is None or 0 <= split.port <= 65_535)
    httpx.URL(normal)  # the engine's client accepts it
    url_id(normal)
    assert url_host(normal)
    assert canonical(normal, None) == normal
    url_trap_reason(normal)


def _normalize_property(url: str) -> None:
    try:
        normal = normalize(url)
    except InvalidURLError as exc:
        assert str(exc), "an InvalidURLError must say what is wrong"
        return
    _assert_normal_form(normal)


#: URLs the fuzzer found failing (``test_fuzz_findings``: a port past int()'s 4,300-digit
#: limit, zero-padded or not; IPvFuture literals; dotted quads that are no IPv4 address).
URL_FINDINGS = [
    "http://h:" + "9" * 5_000 + "/",
    "http://h:" + "0" * 5_000 + "80/",
    "http://[v1. x]/",
    "http://0.0.0.256/",
    "http://127.000.000.001/",
]


@pytest.mark.parametrize("budget", BUDGETS)
def test_normalize_raises_only_invalid_url_error_and_is_a_fixed_point(budget):
    findings = [{"url": url} for url in URL_FINDINGS]
    check("urls.normalize", 1_000 * budget, _normalize_property, findings, url=any_url)


def _resolve_property(base: str, reference: str) -> None:
    try:
        target = resolve(base, reference)
    except InvalidURLError:
        assert split_uri(base).scheme is None, "only a base without a scheme is refused"
        return
    assert isinstance(target, str)
    if split_uri(reference).scheme is None:
        assert split_uri(target).scheme == split_uri(base).scheme
    _normalize_property(target)


@pytest.mark.parametrize("budget", BUDGETS)
def test_resolve_raises_only_for_a_relative_base_and_its_result_normalizes(budget):
    bases = st.one_of(urls(), st.sampled_from(["http://a/b/c/d;p?q", "https://h:8080", "x:"]))
    findings = [{"base": "http://a/b/c", "reference": url} for url in URL_FINDINGS]
    findings += [{"base": url, "reference": "d"} for url in URL_FINDINGS]
    check(
        "urls.resolve",
        600 * budget,
        _resolve_property,
        findings,
        base=bases,
        reference=any_url,
    )


def _canonical_property(url: str, href: str | None) -> None:
    try:
        page = normalize(url)
    except InvalidURLError:
        return
    chosen = canonical(url, href)  # never raises for a page that normalizes
    assert normalize(chosen) == chosen
    assert url_host(chosen).removeprefix("www.") == url_host(page).removeprefix("www.")


@pytest.mark.parametrize("budget", BUDGETS)
def test_canonical_never_raises_and_stays_on_the_site(budget):
    check(
        "urls.canonical",
        400 * budget,
        _canonical_property,
        [{"url": "http://a.test/p", "href": url} for url in URL_FINDINGS],
        url=urls(),
        href=st.one_of(st.none(), any_url),
    )


def _trap_property(url: str) -> None:
    reason = url_trap_reason(url)
    assert reason is None or isinstance(reason, str)


@pytest.mark.parametrize("budget", BUDGETS)
def test_trap_detection_accepts_any_text(budget):
    deep = st.lists(st.sampled_from(["a", "b", "..", "", "%2F"]), max_size=40).map("/".join)
    check("urls.url_trap_reason", 300 * budget, _trap_property, url=st.one_of(any_url, deep))
