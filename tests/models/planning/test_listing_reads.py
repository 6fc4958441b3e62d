"""Which listings to read (``models.planning.listing_reads``): known answers on small cases."""

from __future__ import annotations

import numpy as np
import pytest

from models.planning.listing_reads import (
    HORIZON_DAYS,
    kept_value,
    listings_to_read,
    stale_fetch_order,
)


def test_a_listing_is_read_at_the_threshold_only():
    expected = np.array([8.0, 3.0, 8.0])
    cost = np.array([1.0, 1.0, 2.0])
    items = np.ones(3)
    # 4 expected changes per credit of the read: 8 of 1 yes, 3 of 1 no, 8 of 2 yes
    read = listings_to_read(expected, cost, items, budget=1e9)
    assert read.tolist() == [True, False, True]
    read = listings_to_read(expected, cost, items, budget=1e9, threshold=0.0)
    assert read.tolist() == [True, True, True]


def test_reads_fit_the_budget_with_the_fetches_they_call_for_best_first():
    expected = np.array([4.0, 6.0, np.nan, 2.0])
    cost = np.ones(4)
    items = np.array([1.0, 1.0, 1.0, 0.1])
    # acts: 5, 7, 1 (unknown: the read alone, ranked first), 1.2; per credit 0.8, 0.86, -,
    # 1.67: 1 + 1.2 + 7 = 9.2 fits 9.5, 5 more does not
    read = listings_to_read(expected, cost, items, budget=9.5, threshold=0.0)
    assert read.tolist() == [False, True, True, True]


def test_a_found_change_keeps_its_value_fresh_about_one_over_rate_plus_one_over_h_days():
    value = np.array([2.0, 31.0])
    rate = np.array([0.0, 1.0])
    # no rate: the horizon's 30 days; once a day: 30 / 31 of a day, x 31 = 30.
    # Three roundings (1/H, the sum, the quotient), each within 2**-53 of its result
    assert kept_value(value, rate) == pytest.approx([2.0 * HORIZON_DAYS, 30.0], rel=3 * 2**-53)


def test_known_stale_pages_are_fetched_cheapest_to_keep_fresh_first():
    value = np.array([1.0, 4.0, 1.0, 1.0, 1.0])
    cost = np.array([1.0, 2.0, 1.0, 1.0, 1.0])
    rate = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    # per credit, x H: 1, 2, 1, 1, 1 / 31: ties in page order
    assert stale_fetch_order(value, cost, rate).tolist() == [1, 0, 2, 3, 4]
    # a tie key (the plan's priority, descending) before the page order
    ties = (-np.array([0.0, 0.0, 1.0, 3.0, 0.0]),)
    assert stale_fetch_order(value, cost, rate, ties=ties).tolist() == [1, 3, 2, 0, 4]


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="one entry per listing"):
        listings_to_read(np.ones(2), np.ones(3), np.ones(2), budget=1.0)
