"""Hostile input, round two (issue 16), without sockets: URL userinfo and length, Retry-After
per RFC 9110, unexpected exceptions and cancellation of one attempt, the accounting of a
multi-member gzip body, and the catalog's bounds on value and cost."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import httpx
import pandas as pd
import pytest

from models.discovery.admission import TrapLimits
from models.discovery.urls import (
    MAX_URL_LENGTH,
    InvalidURLError,
    normalize,
    shown_url,
    url_host,
    url_trap_reason,
)
from models.fetching.politeness import parse_retry_after
from tasks.fetch.attempt import BodyLimits, PageLimits, Route, fetch_page
from tasks.fetch.client import as_page_client
from tasks.fetch.response_guard import BodyLimitError, BoundedDecoder
from tasks.fetch.transport_errors import classify_failure
from tasks.store.catalog import VALUE_COST_BOUNDS, CatalogInputError, CatalogStore

PASSWORD = "s3cr3t-PW"

# ---------------------------------------------------------------------- userinfo


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (f"http://user:{PASSWORD}@127.0.0.1:8080/page", "http://127.0.0.1:8080/page"),
        ("http://User:P%40ss@Example.com/", "http://example.com/"),
        ("https://user@example.com:443/a", "https://example.com/a"),
        ("http://@example.com/", "http://example.com/"),  # an empty userinfo
        ("http://a@b:c@example.com/x", "http://example.com/x"),  # the last @ ends it
        ("http://example.com@evil.test/", "http://evil.test/"),  # the host is named honestly
        (f"http://u:{PASSWORD}@[2001:DB8::1]:80/", "http://[2001:db8::1]/"),
    ],
)
def test_normalize_drops_userinfo(raw, expected):
    assert normalize(raw) == expected
    assert "@" not in url_host(normalize(raw))


@pytest.mark.parametrize(
    "raw",
    [
        f"http://user:{PASSWORD}@example.com:99999/",
        f"http://user:{PASSWORD}@exa mple.com/",
        f"ftp://user:{PASSWORD}@example.com/",
        f"http://user:{PASSWORD}@[::1/",
        f"http://user:{PASSWORD}@/",
    ],
)
def test_a_url_that_does_not_normalize_is_named_without_its_password(raw):
    with pytest.raises(InvalidURLError) as caught:
        normalize(raw)
    assert PASSWORD not in str(caught.value)
    assert PASSWORD not in shown_url(raw)


def test_one_url_length_limit_for_discovery_and_the_catalog(tmp_path):
    assert TrapLimits().max_length == MAX_URL_LENGTH == 2048
    base = "http://a.test/"
    longest = base + "x" * (MAX_URL_LENGTH - len(base))
    assert url_trap_reason(longest) is None
    assert url_trap_reason(longest + "x") == "URL longer than 2048 characters (2049)"
    store = CatalogStore(tmp_path)
    assert store.upsert(pd.DataFrame({"url": [longest]})) == 1
    for url in (longest + "x", base + "x" * 100_000):
        with pytest.raises(CatalogInputError, match=r"row 0: URL longer than 2048 characters"):
            store.upsert(pd.DataFrame({"url": [url]}))
    # the limit applies to the normalized URL: 1,000 "é" are 6,000 characters encoded
    with pytest.raises(CatalogInputError, match=r"\(6014\)"):
        store.upsert(pd.DataFrame({"url": [base + "é" * 1000]}))
    assert len(store.read()) == 1  # nothing else was written


# ---------------------------------------------------------------------- catalog bounds


@pytest.mark.parametrize("column", ["value", "cost"])
@pytest.mark.parametrize("bad", [1e308, 1.000001e6, 9.99e-7, 5e-324])
def test_value_and_cost_out_of_the_stated_bounds_are_refused_by_name(tmp_path, column, bad):
    frame = pd.DataFrame({"url": ["http://a.test/1", "http://a.test/2"], column: [1.0, bad]})
    with pytest.raises(CatalogInputError) as caught:
        CatalogStore(tmp_path).upsert(frame)
    message = str(caught.value)
    assert f"'{column}' must be positive and finite, between 1e-06 and 1e+06" in message
    assert message.endswith(f"{bad!r} for http://a.test/2")
    assert not (tmp_path / "pages" / "catalog.parquet").exists()


def test_the_bounds_themselves_are_accepted(tmp_path):
    low, high = VALUE_COST_BOUNDS
    frame = pd.DataFrame(
        {"url": ["http://a.test/1", "http://a.test/2"], "value": [low, high], "cost": [high, low]}
    )
    assert CatalogStore(tmp_path).upsert(frame) == 2


# ---------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("0", 0.0),
        (" 7\t", 7.0),
        ("0012", 12.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: now
        ("Wed, 21 Oct 2015 07:30:00 GMT", 120.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-15 07:30:00 GMT", 120.0),  # rfc850-date
        ("Wed Oct 21 07:30:00 2015", 120.0),  # asctime-date
    ],
)
def test_retry_after_delay_seconds_and_http_dates(value, seconds):
    from datetime import UTC, datetime

    now = datetime(2015, 10, 21, 7, 28, tzinfo=UTC)
    assert parse_retry_after(value, now) == seconds


@pytest.mark.parametrize(
    "value",
    [
        "²",
        "¹",
        "³",
        "1²",
        "٣",
        "١٢٠",
        "１２",
        "߃",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "0x10",
        "soon",
        "",
        " ",
    ],
)
def test_retry_after_that_is_neither_is_ignored(value):
    assert parse_retry_after(value) is None


def test_retry_after_extremes_stay_numbers():
    assert parse_retry_after("Wed, ٢١ Oct 2015 07:28:00 GMT") is None  # date in other digits
    assert parse_retry_after("Fri, 31 Dec 99999 23:59:59 GMT") is None  # no such date
    assert parse_retry_after("9" * 5000) == float("inf")  # callers cap it
    far = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT")
    assert far is not None and far > 2.5e11


# ---------------------------------------------------------------------- exceptions


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("Cannot combine AUTHORIZATION header with AUTH argument"),
        RuntimeError("Session is closed"),
        KeyError("x"),
        asyncio.CancelledError(),
    ],
)
def test_an_exception_no_network_raises_is_an_unexpected_error_not_retried(exc):
    failure = classify_failure(exc)
    assert (failure.outcome, failure.retryable, failure.unexpected) == ("error", False, True)
    assert failure.reason.startswith(f"unexpected {type(exc).__name__}")


def test_a_network_error_is_still_retried():
    failure = classify_failure(httpx.ConnectError("connection refused"))
    assert (failure.outcome, failure.retryable, failure.unexpected) == ("error", True, False)


class _Transport(httpx.AsyncBaseTransport):
    def __init__(self, behaviour):
        self.behaviour = behaviour

    async def handle_async_request(self, request):
        return await self.behaviour()


def _attempt(behaviour):
    client = as_page_client(httpx.AsyncClient(transport=_Transport(behaviour)))
    limits = PageLimits(BodyLimits(1 << 20, 100.0), timeout_s=30.0, max_redirects=5)
    return fetch_page(client, Route(), "http://a.test/", {}, limits, lambda url: None)


def test_a_cancelled_error_the_transport_raises_by_itself_is_the_attempts_outcome():
    async def stray():
        raise asyncio.CancelledError()

    attempt = asyncio.run(_attempt(stray))
    assert (attempt.outcome, attempt.retryable) == ("error", False)
    assert attempt.reason == "unexpected CancelledError"


def test_cancelling_the_task_of_an_attempt_still_cancels_it():
    async def scenario():
        entered = asyncio.Event()

        async def hang():
            entered.set()
            await asyncio.sleep(3600)

        task = asyncio.create_task(_attempt(hang))
        await entered.wait()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=30)
        return task.cancelled() if done else "still running"

    assert asyncio.run(scenario()) is True


# ---------------------------------------------------------------------- gzip members


def _member(size: int) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return deflate.compress(bytes(size)) + deflate.flush()


def _feed(decoder: BoundedDecoder, data: bytes, chunk: int = 65_536) -> None:
    for i in range(0, len(data), chunk):
        decoder.feed(data[i : i + chunk])


def test_a_bomb_of_many_small_gzip_members_is_a_decompression_bomb():
    member = _member(1 << 20)  # 1 MiB of zeros in about 1 KiB
    body = member * 2000
    decoder = BoundedDecoder("gzip", 10 << 20, 100.0)
    with pytest.raises(BodyLimitError) as caught:
        _feed(decoder, body)
    assert caught.value.outcome == "decompression_bomb", caught.value.reason
    # what was counted is what zlib consumed: whole members, at most one more partly
    assert decoder.raw <= (decoder.size // (1 << 20) + 1) * len(member)


@pytest.mark.parametrize("chunk", [1, 7, 500, 65_536])
def test_the_raw_bytes_of_a_multi_member_body_are_counted_exactly(chunk):
    members = [gzip.compress(b"page %d " % i * 3000) for i in range(5)]
    body = b"".join(members)
    decoder = BoundedDecoder("gzip", 1 << 20, 1e9)
    _feed(decoder, body, chunk)
    assert decoder.raw == len(body)
    assert decoder.body() == b"".join(gzip.decompress(m) for m in members)


def test_discovered_urls_with_userinfo_are_the_plain_page_and_never_show_the_password():
    from models.discovery.admission import Candidate, screen_candidates
    from models.discovery.links import links_from_html
    from models.discovery.seen import ExactSeenSet

    html = f'<a href="http://u:{PASSWORD}@b.test/x">x</a><a href="/y">y</a>'.encode()
    links = links_from_html(f"http://u:{PASSWORD}@a.test/page", html, "text/html")
    found = screen_candidates(
        [
            Candidate(f"http://u:{PASSWORD}@a.test/sitemap-loc", "sitemap"),
            *(Candidate(link, "link") for link in links),
            Candidate(f"http://u:{PASSWORD}@a.test:99999/bad", "sitemap"),
        ],
        known=ExactSeenSet.of([]),
    )
    urls = sorted(page.url for page in found.new)
    assert urls == ["http://a.test/sitemap-loc", "http://a.test/y", "http://b.test/x"]
    assert found.rejected.counts["bad_url"] == 1
    assert PASSWORD not in repr(found.rejected.examples)
