"""Which listings to read (``models.planning.listing_reads``): known answers on small cases."""

from __future__ import annotations

import numpy as np
import pytest

from models.planning.listing_reads import (
    HORIZON_DAYS,
    ListedItems,
    kept_value,
    listed_items,
    listings_to_read,
    stale_fetch_order,
)


def _items(listing, changed, worth, *, pending=None, cost=None):
    listing = np.asarray(listing, dtype=np.int64)
    n = listing.shape[0]
    return ListedItems(
        listing,
        np.asarray(changed, dtype=np.float64),
        np.zeros(n, dtype=bool) if pending is None else np.asarray(pending, dtype=bool),
        np.ones(n) if cost is None else np.asarray(cost, dtype=np.float64),
        np.asarray(worth, dtype=np.float64),
    )


def test_a_listing_is_read_at_the_threshold_only():
    # listings 0 and 2 show 8 items each, listing 1 shows 3: all certain to show a change
    listing = [0] * 8 + [1] * 3 + [2] * 8
    items = _items(listing, np.ones(19), np.ones(19))
    cost = np.array([1.0, 1.0, 2.0])
    # 4 expected changes per credit of the read: 8 of 1 yes, 3 of 1 no, 8 of 2 yes
    read = listings_to_read(cost, items, budget=1e9)
    assert read.tolist() == [True, False, True]
    read = listings_to_read(cost, items, budget=1e9, threshold=0.0)
    assert read.tolist() == [True, True, True]
    # pending items are known already: a read would tell nothing of them
    pending = np.r_[np.zeros(8), np.ones(3), np.r_[np.ones(5), np.zeros(3)]]
    items = _items(listing, np.ones(19), np.ones(19), pending=pending)
    assert listings_to_read(cost, items, budget=1e9, threshold=1.0).tolist() == [True, False, True]
    assert listings_to_read(cost, items, budget=1e9, threshold=2.0).tolist() == [True, False, False]


def test_a_listing_never_read_is_read_first_if_it_fits():
    # listing 1 has no item known: read before listing 0, whose read and fetches cost 3
    items = _items([0, 0], [1.0, 1.0], [5.0, 5.0])
    cost = np.ones(2)
    assert listings_to_read(cost, items, budget=4.0, threshold=0.0).tolist() == [True, True]
    assert listings_to_read(cost, items, budget=3.5, threshold=0.0).tolist() == [False, True]


def test_a_read_is_priced_with_the_follow_ups_the_fetch_order_makes():
    # listing 0: six items likely changed but fetched last (worth 0.01: a flash sale);
    # listing 1: three pending items (known stale, fetched first whatever is read) and three
    # likely changed, all worth 1. Budget 7: the pending 3, then listing 1's read and its 3
    # follow-ups fill it. The old fit ranked reads by changes per credit of the read and
    # its fetches (6/7 against 3/4), took listing 0 (7 credits), and the fetch order then
    # spent 3 of the 6 credits left on the pending items and left 3 of its changes unfetched
    listing = [0] * 6 + [1] * 6
    worth = np.r_[np.full(6, 0.01), np.ones(6)]
    pending = np.zeros(12, dtype=bool)
    pending[6:9] = True
    items = _items(listing, np.ones(12), worth, pending=pending)
    cost = np.ones(2)
    assert listings_to_read(cost, items, budget=7.0, threshold=0.0).tolist() == [False, True]
    # with a credit less, listing 1's read and follow-ups no longer fit behind the pending
    assert listings_to_read(cost, items, budget=6.5, threshold=0.0).tolist() == [False, False]
    # once the budget covers every fetch the reads call for (3 + 4 + 7), both are read
    assert listings_to_read(cost, items, budget=14.0, threshold=0.0).tolist() == [True, True]


def test_only_the_changes_ranked_above_the_cut_off_count_toward_the_threshold():
    # listing 0: 2 items of worth 3 and 6 of worth 1 (its 4th best change is of worth 1);
    # listing 1: 4 items of worth 2. Threshold 4 changes a read: at budget 5 the cut-off is
    # worth 2, where listing 0 shows only 2 changes (not worth a read), listing 1 four
    listing = [0] * 8 + [1] * 4
    worth = np.r_[3.0, 3.0, np.ones(6), np.full(4, 2.0)]
    items = _items(listing, np.ones(12), worth)
    cost = np.ones(2)
    assert listings_to_read(cost, items, budget=5.0).tolist() == [False, True]
    assert listings_to_read(cost, items, budget=14.0).tolist() == [True, True]
    # expected changes, not certain ones, priced at their expected fetches: at 0.5 each and
    # threshold 2, listing 1 takes its read and 4 x 0.5, listing 0 its read and 8 x 0.5
    items = _items(listing, np.full(12, 0.5), worth)
    assert listings_to_read(cost, items, budget=7.9, threshold=2.0).tolist() == [False, True]
    assert listings_to_read(cost, items, budget=8.0, threshold=2.0).tolist() == [True, True]


def test_a_found_change_keeps_its_value_fresh_about_one_over_rate_plus_one_over_h_days():
    value = np.array([2.0, 31.0])
    rate = np.array([0.0, 1.0])
    # no rate: the horizon's 30 days; once a day: 30 / 31 of a day, x 31 = 30.
    # Three roundings (1/H, the sum, the quotient), each within 2**-53 of its result
    assert kept_value(value, rate) == pytest.approx([2.0 * HORIZON_DAYS, 30.0], rel=3 * 2**-53)


def test_known_stale_pages_are_fetched_by_kept_value_per_credit_squared():
    value = np.array([1.0, 3.0, 1.0, 1.0, 1.0, 4.0])
    cost = np.array([1.0, 2.0, 1.0, 1.0, 1.0, 2.0])
    rate = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    # kept value / cost^2, / H: 1, 0.75, 1, 1, 1 / 31, 1: page 1 keeps 1.5x the value a credit
    # of page 0 does, but finds half the changes a credit; ties in page order
    assert stale_fetch_order(value, cost, rate).tolist() == [0, 2, 3, 5, 1, 4]
    # a tie key (the plan's priority, descending) before the page order
    ties = (-np.array([0.0, 0.0, 1.0, 3.0, 0.0, 2.0]),)
    assert stale_fetch_order(value, cost, rate, ties=ties).tolist() == [3, 5, 2, 0, 1, 4]


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="one entry per item"):
        _items([0, 1], [1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="index listing_cost"):
        listings_to_read(np.ones(2), _items([0, 2], [1.0, 1.0], [1.0, 1.0]), budget=1.0)


def test_listed_items_rank_as_the_fetch_order_does():
    value = np.array([1.0, 4.0, 1.0])
    cost = np.array([1.0, 2.0, 1.0])
    rate = np.array([0.0, 0.0, 1.0])
    items = listed_items(np.zeros(3), np.ones(3), np.zeros(3), value, cost, rate)
    assert (
        np.argsort(-items.worth, kind="stable").tolist()
        == stale_fetch_order(value, cost, rate).tolist()
    )
