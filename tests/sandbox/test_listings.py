"""Shop hosts: category pages whose per-item summaries change exactly with the items' records,
and item pages that declare their JSON endpoint."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from sandbox import HostBehaviour, SandboxWeb, serve_sandbox
from sandbox.content import page_record
from tests.sandbox.conftest import extract_record, json_record

_ITEM = re.compile(
    r'<li class="item" data-item="(\d+)"><a class="item-link" href="/p/(\d+)">'
    r'<span class="name">(.*?)</span></a> <span class="price" data-price="([0-9.]+)">'
    r'.*?<span class="availability">(\w+)</span></li>'
)


def _shop(clock, size=8, pages=20):
    return SandboxWeb.generate(
        hosts=2,
        pages_per_host=pages,
        seed=5,
        behaviours={0: HostBehaviour(listing_size=size, json_link=True)},
        clock=clock,
    )


def _summaries(text):
    return {int(m[0]): (html.unescape(m[2]), float(m[3]), m[4]) for m in _ITEM.findall(text)}


def test_listings_cover_the_items_in_order_with_their_current_summaries(clock):
    web = _shop(clock)
    assert web.listing_count(0) == 3 and web.listing_count(1) == 0
    assert list(web.listing_items(0, 2)) == [16, 17, 18, 19]
    with serve_sandbox(web) as running, httpx.Client() as client:
        assert running.listing_urls(1) == []
        seen = {}
        for url in running.listing_urls(0):
            answer = client.get(url)
            assert answer.status_code == 200
            seen |= _summaries(answer.text)
        assert sorted(seen) == list(range(20))
        for j, (name, price, availability) in seen.items():
            record = web.record(running.page_urls(0)[j])
            assert (name, price, availability) == (
                record["title"],
                record["price"],
                record["availability"],
            )
        assert client.get(running.base_url(1) + "/c/0").status_code == 404
        assert client.get(running.base_url(0) + "/c/3").status_code == 404


def test_a_summary_changes_exactly_when_the_record_does(clock):
    # every version moves the price (its cents' parity is the version's), so a summary never
    # hides a change: checked over many versions of many pages
    for key in range(200):
        previous = page_record(key, 0)
        for version in range(1, 40):
            record = page_record(key, version)
            assert record.price != previous.price
            assert round(record.price * 100) % 2 == version % 2
            previous = record


def test_a_listing_changes_when_any_listed_item_changes_and_its_validators_say_so(clock):
    web = _shop(clock, size=10, pages=10)
    with serve_sandbox(web) as running, httpx.Client() as client:
        url = running.listing_urls(0)[0]
        first = client.get(url)
        tag = first.headers["etag"]
        assert client.get(url, headers={"If-None-Match": tag}).status_code == 304
        before = clock.now()
        items = running.page_urls(0)
        while not any(web.version(u, clock.now()) != web.version(u, before) for u in items):
            clock.advance(hours=6)
        second = client.get(url, headers={"If-None-Match": tag})
        assert second.status_code == 200 and second.headers["etag"] != tag
        old, new = _summaries(first.text), _summaries(second.text)
        for j, u in enumerate(items):
            assert (old[j] != new[j]) == (web.version(u) != web.version(u, before))


def test_item_pages_declare_their_json_endpoint_which_gives_the_same_record(clock):
    web = _shop(clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        page = client.get(running.page_urls(0)[4])
        link = re.search(
            r'<link rel="alternate" type="application/json" href="([^"]+)">', page.text
        )
        assert link is not None and link.group(1) == "/api/item/4.json"
        endpoint = client.get(running.base_url(0) + link.group(1))
        assert json_record(endpoint.text) == extract_record(page.text)
        plain = client.get(running.page_urls(1)[4])
        assert 'type="application/json"' not in plain.text  # declared only where asked


def test_listing_size_must_not_be_negative():
    with pytest.raises(ValueError, match="listing_size"):
        HostBehaviour(listing_size=-1)


def test_a_category_page_that_does_not_exist_is_refused(clock):
    web = _shop(clock)
    with pytest.raises(ValueError, match="no category page"):
        web.listing_items(0, 3)
    with pytest.raises(ValueError, match="no category page"):
        web.listing_items(1, 0)
