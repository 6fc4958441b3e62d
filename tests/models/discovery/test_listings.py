"""Listing pages: item blocks parsed into (item URL, summary hash), compared without loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.discovery.listings import (
    ListingRule,
    ListingRuleError,
    compare_summaries,
    parse_listing,
    summary_hash,
)
from models.discovery.urls import url_id

BASE = "http://shop.example/c/0"


def _listing(items, served="2026-01-01T00:00:00+00:00", extra=""):
    rows = "".join(
        f'<li class="item"><a class="item-link" href="/p/{j}"><span class="name">{name}</span>'
        f'</a> <span class="price">{price:.2f} EUR</span> <span>{avail}</span></li>\n'
        for j, name, price, avail in items
    )
    return (
        "<html><head><title>Category</title></head><body>"
        f"<header>served {served}</header><main><ul class='listing'>\n{rows}</ul>"
        '<nav><a href="/c/1">2</a> <a href="/c/2">3</a></nav>'
        f"{extra}</main></body></html>"
    ).encode()


ITEMS = [(j, f"Item {j}", 10.0 + j, "InStock") for j in range(12)]


def test_learned_blocks_give_each_item_its_url_and_summary():
    found = parse_listing(_listing(ITEMS), "text/html; charset=utf-8", BASE)
    assert found.urls == [f"http://shop.example/p/{j}" for j in range(12)]
    assert found.url_ids.tolist() == [url_id(u) for u in found.urls]
    assert found.summaries[3] == "Item 3 13.00 EUR InStock"
    assert found.summary_hashes.dtype == np.int64
    assert found.summary_hashes[3] == summary_hash("Item 3 13.00 EUR InStock")
    # the pager's two links are not items
    assert "http://shop.example/c/1" not in found.urls


def test_a_declared_rule_reads_the_same_items():
    learned = parse_listing(_listing(ITEMS), "text/html", BASE)
    declared = parse_listing(_listing(ITEMS), "text/html", BASE, ListingRule("li.item"))
    assert declared.urls == learned.urls
    assert (declared.summary_hashes == learned.summary_hashes).all()


def test_noise_outside_or_inside_the_page_does_not_change_a_summary():
    a = parse_listing(_listing(ITEMS, served="2026-01-01T00:00:00+00:00"), "text/html", BASE)
    b = parse_listing(_listing(ITEMS, served="2026-01-02T11:22:33+00:00"), "text/html", BASE)
    assert (a.summary_hashes == b.summary_hashes).all()


def test_a_price_change_changes_that_items_summary_only():
    moved = list(ITEMS)
    moved[5] = (5, "Item 5", 14.99, "InStock")
    before = parse_listing(_listing(ITEMS), "text/html", BASE)
    after = parse_listing(_listing(moved), "text/html", BASE)
    differs = before.summary_hashes != after.summary_hashes
    assert np.flatnonzero(differs).tolist() == [5]


def test_pages_that_are_not_listings_have_no_items():
    few = parse_listing(_listing(ITEMS[:3]), "text/html", BASE)
    assert len(few) == 0 and few.url_ids.dtype == np.int64
    assert len(parse_listing(b'{"items": []}', "application/json", BASE)) == 0
    assert len(parse_listing(_listing(ITEMS), "text/html", BASE, ListingRule("li.nothing"))) == 0


def test_an_item_listed_twice_counts_once():
    twice = [*ITEMS, ITEMS[0]]
    found = parse_listing(_listing(twice), "text/html", BASE)
    assert len(found) == 12


def test_a_bad_rule_is_refused_when_built():
    with pytest.raises(ListingRuleError, match="invalid CSS selector"):
        ListingRule("li[[")
    with pytest.raises(ListingRuleError, match="min_items"):
        ListingRule(min_items=0)


def test_comparison_marks_changed_unchanged_and_new_items():
    previous_ids = np.array([30, 10, 20], dtype=np.int64)
    previous_hashes = np.array([3, 1, 2], dtype=np.int64)
    seen_ids = np.array([10, 20, 40, 30], dtype=np.int64)
    seen_hashes = np.array([1, 9, 4, 3], dtype=np.int64)
    out = compare_summaries(previous_ids, previous_hashes, seen_ids, seen_hashes)
    assert out.url_ids.tolist() == [10, 20, 40, 30]
    assert out.known.tolist() == [True, True, False, True]
    assert out.changed.tolist() == [False, True, False, False]


def test_comparison_with_nothing_kept_marks_everything_new():
    out = compare_summaries(
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        np.array([5, 6], dtype=np.int64),
        np.array([1, 2], dtype=np.int64),
    )
    assert out.known.tolist() == [False, False] and out.changed.tolist() == [False, False]


@given(
    st.dictionaries(st.integers(0, 50), st.integers(0, 3), max_size=30),
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), max_size=40),
)
def test_comparison_agrees_with_a_plain_dictionary(kept, seen):
    ids = np.array(list(kept), dtype=np.int64)
    hashes = np.array(list(kept.values()), dtype=np.int64)
    seen_ids = np.array([s[0] for s in seen], dtype=np.int64)
    seen_hashes = np.array([s[1] for s in seen], dtype=np.int64)
    out = compare_summaries(ids, hashes, seen_ids, seen_hashes)
    last = dict(seen)  # the last occurrence of an item counts
    assert sorted(out.url_ids.tolist()) == sorted(last)
    for i, h, known, changed in zip(
        out.url_ids.tolist(), out.summary_hashes.tolist(), out.known, out.changed, strict=True
    ):
        assert h == last[i]
        assert known == (i in kept)
        assert changed == (i in kept and kept[i] != h)
