"""The backtest's listings and JSON-endpoint options (``models.backtest.listings``)."""

from __future__ import annotations

import numpy as np
import pytest

from models.backtest.listings import (
    ListingPlannerPolicy,
    ShopListings,
    ShopRun,
    ShopSignals,
    SummaryTruth,
    credits_at_freshness,
    listings_of,
    run_shop,
    shop_signal_web,
)
from models.backtest.web import BacktestInputError, DayChanges, PublicWeb


def _web(n=12, hosts=2):
    host = np.arange(n, dtype=np.int64) % hosts
    return PublicWeb(host, host.copy(), np.ones(n), np.ones(n), np.full(hosts, 100.0))


class _Scripted:
    """Changes on given days for given pages (one change, at mid-day)."""

    def __init__(self, n, script):
        self.n = n
        self.script = script

    def on_day(self, day):
        count = np.zeros(self.n, dtype=np.int64)
        count[list(self.script.get(day, ()))] = 1
        first = np.where(count > 0, 0.5, np.inf)
        return DayChanges(first, count, first.copy())


def test_listings_hold_one_category_each_and_cover_every_page():
    web = shop_signal_web(3_000, ShopSignals(), seed=2).web
    found = listings_of(web, 40)
    counts = np.bincount(found.of_page, minlength=found.count)
    assert counts.sum() == web.size and counts.max() <= 40 and counts.min() >= 1
    # every listing's items share one group, hence one host
    groups = np.full(found.count, -1)
    groups[found.of_page] = web.groups
    assert (groups[found.of_page] == web.groups).all()
    assert (found.host[found.of_page] == web.hosts).all()


def test_the_summary_truth_shows_changes_after_the_given_day_only():
    truth = SummaryTruth(_Scripted(4, {0: [1], 2: [2]}), 4, 1.0, seed=0)
    for day in range(4):
        truth.on_day(day)
    pages = np.arange(4)
    # observed at day 1: page 1 changed on day 0 (before), page 2 on day 2 (after)
    assert truth.shown_since(pages, np.full(4, 1.0)).tolist() == [False, False, True, False]
    assert truth.shown_since(pages, np.zeros(4)).tolist() == [False, True, True, False]


def test_the_changed_item_is_fetched_and_the_unchanged_one_is_not():
    web = _web()
    changes = _Scripted(web.size, {0: [3, 8]})
    truth = SummaryTruth(changes, web.size, 1.0, seed=0)
    listings = ShopListings(
        of_page=np.arange(web.size) // 6, cost=np.ones(2), host=np.array([0, 1])
    )
    # threshold 0: both listings are read on day 1, whatever the estimates say
    # budget left after the listings and the two changed items: the planner has 6 to spend
    policy = ListingPlannerPolicy(web, 10.0, listings, truth, threshold=0.0)
    truth.on_day(0)
    truth.on_day(1)
    batch = policy.choose(1)
    assert sorted(batch.tolist()) == [3, 8]  # what changed, nothing "just to confirm"
    assert policy.listing_cost[1] == 2.0
    # every other listed item is an unchanged observation at day 1
    assert policy.unchanged_on_listing == 10 and policy.changed_on_listing == 2
    assert np.flatnonzero(policy.observations.last_fetch == 1.0).tolist() == [
        i for i in range(12) if i not in (3, 8)
    ]


def test_a_listing_whose_follow_up_fetches_do_not_fit_is_not_read():
    web = _web()
    truth = SummaryTruth(_Scripted(web.size, {0: list(range(12))}), web.size, 1.0, seed=0)
    listings = ShopListings(np.arange(web.size) // 6, np.ones(2), np.array([0, 1]))
    policy = ListingPlannerPolicy(web, 1.0, listings, truth, threshold=0.0)
    truth.on_day(0)
    truth.on_day(1)
    batch = policy.choose(1)
    # a read (1 credit) and the changes it would reveal cost more than the budget: the
    # planner keeps the credit (the old rule spent it all on one listing and fetched nothing)
    assert policy.listing_cost[1] == 0.0
    assert 0 < web.cost[batch].sum() <= 1.0


def test_items_a_listing_showed_changed_are_remembered_until_fetched():
    web = _web()
    truth = SummaryTruth(_Scripted(web.size, {0: [0, 1, 2, 3, 4, 5]}), web.size, 1.0, seed=0)
    listings = ShopListings(np.arange(web.size) // 6, np.ones(2), np.array([0, 1]))
    policy = ListingPlannerPolicy(web, 4.0, listings, truth, threshold=0.0)
    truth.on_day(0)
    truth.on_day(1)
    first = policy.choose(1)
    assert policy.listing_reads[1] >= 1 and policy.pending.any()
    known = np.flatnonzero(policy.pending)
    assert not np.isin(known, first).any()  # fetched ones are no longer pending
    policy.observe(1, first, np.isin(first, np.arange(6)))
    truth.on_day(2)
    second = policy.choose(2)
    # the next day the remembered items are fetched without reading their listing again
    assert np.isin(known, second).any()
    assert not policy.pending[second].any()


def test_json_endpoints_price_every_visit_at_one_plain_request():
    plain = shop_signal_web(4_000, ShopSignals(), seed=1).web
    json = shop_signal_web(4_000, ShopSignals(json_endpoints=True), seed=1).web
    assert (plain.cost > 1).any(), "the seed should have a shop that needs rendering"
    assert (json.cost == 1.0).all()
    assert (
        shop_signal_web(4_000, ShopSignals(json_endpoints=True), seed=1, bandwidth=True).web.cost
        < 1
    ).all()


def test_listings_find_more_changes_per_credit_at_the_same_budget():
    options = {"pages": 2_000, "days": 16, "seed": 1, "budget_share": 0.1}
    off = run_shop(ShopSignals(), **options)
    on = run_shop(ShopSignals(listings=True), **options)
    assert on.budget == off.budget and on.listing_credits > 0
    assert on.credits <= off.credits + 1e-9  # never over the budget
    assert on.credits_per_change < off.credits_per_change
    assert on.freshness > off.freshness
    # with exact summaries, the items fetched for a changed summary all found a change
    assert on.detected / on.fetches > off.detected / off.fetches


def test_bad_options_are_refused():
    with pytest.raises(BacktestInputError, match="summary_recall"):
        ShopSignals(summary_recall=0.0)
    with pytest.raises(BacktestInputError, match="listing_size"):
        ShopSignals(listing_size=0)


def test_credits_at_freshness_reads_the_curve_between_its_runs() -> None:
    def run(freshness: float, credits: float) -> ShopRun:
        return ShopRun("planner", 1.0, freshness, credits, 0.0, 1.0, credits)

    # out of order on purpose: the curve is read in freshness order
    curve = [run(0.8, 4.0), run(0.5, 1.0), run(0.6, 2.0)]
    # exact at a run, linear between two (|error| bound: float64 rounding, ~1e-15)
    assert credits_at_freshness(curve, 0.6) == pytest.approx(2.0, abs=1e-12)
    assert credits_at_freshness(curve, 0.7) == pytest.approx(3.0, abs=1e-12)
    # outside the curve there is nothing to compare with
    assert credits_at_freshness(curve, 0.45) is None
    assert credits_at_freshness(curve, 0.9) is None
    assert credits_at_freshness([], 0.5) is None


def test_a_known_stale_item_the_budget_leaves_out_stays_known_until_a_fetch():
    n = 12
    host = np.arange(n, dtype=np.int64) % 2
    value = np.ones(n)
    value[0] = 1e-4  # known stale, but the cheapest to keep fresh comes first
    web = PublicWeb(host, host.copy(), value, np.ones(n), np.full(2, 100.0))
    truth = SummaryTruth(_Scripted(n, {}), n, 1.0, seed=0)
    listings = ShopListings(np.arange(n) // 6, np.ones(2), np.array([0, 1]))
    policy = ListingPlannerPolicy(web, 1.0, listings, truth, threshold=1e9)  # no reads
    policy.pending[[0, 1]] = True  # shown changed on an earlier day, not fetched yet
    truth.on_day(0)
    truth.on_day(1)
    batch = policy.choose(1)
    assert batch.tolist() == [1] and not policy.pending[1]  # fetched: known again
    assert policy.pending[0]  # the budget left it out: still known stale, not forgotten
    policy.observe(1, batch, np.array([True]))
    truth.on_day(2)
    assert policy.choose(2).tolist() == [0] and not policy.pending.any()


def test_a_read_whose_changes_the_fetch_order_would_leave_out_is_not_taken():
    # listing 0 shows six items of little value (fetched last: a flash sale), listing 1
    # six valuable ones, three of them known stale already (fetched first whatever is
    # read); every item changed. Budget 7: the old fit took listing 0 (6 changes for 7
    # credits against listing 1's 3 for 4), and the fetch order then spent 3 of the 6
    # credits left on the pending items and left half of what listing 0 showed unfetched.
    # Counting the follow-ups the order makes, listing 1 is read and all it shows fetched
    n = 12
    host = np.arange(n, dtype=np.int64) % 2
    value = np.r_[np.full(6, 0.01), np.ones(6)]
    web = PublicWeb(host, host.copy(), value, np.ones(n), np.full(2, 100.0))
    truth = SummaryTruth(_Scripted(n, {0: list(range(n))}), n, 1.0, seed=0)
    listings = ShopListings(np.arange(n) // 6, np.ones(2), np.array([0, 1]))
    policy = ListingPlannerPolicy(web, 7.0, listings, truth, threshold=0.0)
    policy.pending[[6, 7, 8]] = True  # shown changed on an earlier day, not fetched yet
    # 400 days after the last visits, under the prior's rate (~0.018 a day): each item
    # changed with probability ~0.999, so the reads are priced near 6 + 1 and 3 + 1
    for day in range(401):
        truth.on_day(day)
    batch = policy.choose(400)
    assert policy.listing_cost[400] == 1.0 and policy.changed_on_listing == 3
    assert sorted(batch.tolist()) == list(range(6, 12))  # the pending 3 and the 3 shown
    assert not policy.pending.any()
