"""The bugs the fuzz properties found, pinned as plain regression tests.

1. ``normalize`` raised a bare ``ValueError`` (not ``InvalidURLError``) for a port of more
   than 4,300 digits: ``int()`` refuses such strings since Python 3.11.
2. ``normalize`` accepted hosts no HTTP client can connect to: IPvFuture literals
   (``[v1.x]``, even ``[v1. x]`` with a space) and dotted quads that are not IPv4 addresses
   (``0.0.0.256``, ``127.000.000.001``), which httpx then refused as an invalid URL.
3. ``parse_lastmod`` (and so every sitemap parse) raised ``OverflowError`` for a time whose
   UTC equivalent falls outside years 1-9999 (``0001-01-01T00:00:00+01:00``).
"""

from __future__ import annotations

import httpx
import pytest

from models.discovery.sitemap import parse_lastmod, parse_sitemap
from models.discovery.urls import InvalidURLError, normalize

pytestmark = pytest.mark.reliability


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h:" + "9" * 5_000 + "/", "out of range"),
        ("http://h:" + "1" + "0" * 4_400 + "/", "out of range"),
        ("http://[v1.abc]/", "IPvFuture"),
        ("http://[V7.a:b]/", "IPvFuture"),
        ("http://[v1. x]/", "IPvFuture"),
        ("http://0.0.0.256/", "invalid IPv4"),
        ("http://127.000.000.001/", "invalid IPv4"),
        ("http://1.2.3.4444/", "invalid IPv4"),
    ],
)
def test_hosts_and_ports_no_client_can_use_are_invalid_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidURLError, match=message):
        normalize(url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:" + "0" * 5_000 + "80/", "http://h/"),  # leading zeros are not digits
        ("http://h:000008080/", "http://h:8080/"),
        ("http://127.0.0.1:8080/p", "http://127.0.0.1:8080/p"),
        ("http://255.255.255.255/", "http://255.255.255.255/"),
        ("http://1.2.3.4.5/", "http://1.2.3.4.5/"),  # not a dotted quad: a host name
    ],
)
def test_long_zero_padded_ports_and_real_addresses_still_normalize(url: str, expected: str) -> None:
    assert normalize(url) == expected
    httpx.URL(expected)


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00+01:00"]
)
def test_a_lastmod_outside_the_datetime_range_in_utc_is_unknown(text: str) -> None:
    assert parse_lastmod(text) is None


def test_a_sitemap_with_such_a_lastmod_keeps_the_entry() -> None:
    data = (
        b"<urlset><url><loc>https://s.example/a</loc>"
        b"<lastmod>0001-01-01T00:00:00+01:00</lastmod></url></urlset>"
    )
    parsed = parse_sitemap(data)
    assert [e.loc for e in parsed.entries] == ["https://s.example/a"]
    assert parsed.entries[0].lastmod is None and parsed.bad_fields == 1
