"""Pages never fetched: a new catalog gets the whole budget; later ones compete with due pages."""

from dataclasses import fields, replace

import numpy as np
import pytest

from models.allocation.freshness import fresh_days_after_visit, freshness_gain
from models.allocation.shards import LocalShards, SelectionSettings, ShardSelection, select_sharded
from models.planning.select import (
    AHEAD,
    DISCOVERY,
    DUE,
    REESTIMATION,
    Candidates,
    Slices,
    select_batch,
)


def catalog(n=50, *, hosts=1, seed=0, value=None, cost=None, rate=0.2, frequency=0.1):
    """``n`` pages never fetched (a freshly imported catalog): every estimate is a prior."""
    rng = np.random.default_rng(seed)
    return Candidates(
        page_ids=np.arange(n, dtype=np.int64),
        hosts=np.arange(n, dtype=np.int64) % hosts,
        value=np.ones(n) if value is None else value,
        cost=np.ones(n) if cost is None else cost,
        rate=np.full(n, rate),
        frequency=np.full(n, frequency),
        log_std=rng.uniform(1.0, 2.0, n),
        days_since_visit=np.full(n, np.nan),
    )


def test_a_new_catalog_is_fetched_with_the_whole_budget():
    plan = select_batch(catalog(50), 20.0, np.array([500.0]))
    assert plan.index.shape[0] == 20 and plan.cost.sum() == 20.0
    assert (plan.reason == DISCOVERY).all()
    # a first visit is sure to find no copy: the whole interval's fresh days are bought
    assert plan.expected_change == pytest.approx(np.ones(20))
    assert plan.expected_gain == pytest.approx(fresh_days_after_visit(0.2, 10.0) * np.ones(20))


def test_a_new_catalog_takes_what_the_hosts_can_take():
    one_host = select_batch(catalog(50), 20.0, np.array([7.0]))
    assert one_host.index.shape[0] == 7
    # three hosts of 17, 17 and 16 pages that can take 3, 4 and 100 visits this cycle
    c = catalog(50, hosts=3)
    plan = select_batch(c, 20.0, np.array([3.0, 4.0, 100.0]))
    assert np.bincount(c.hosts[plan.index], minlength=3).tolist() == [3, 4, 13]
    everything = select_batch(c, 80.0, np.array([3.0, 4.0, 100.0]))
    assert everything.index.shape[0] == 3 + 4 + 16  # min(B, capacity), never more


def test_a_new_catalog_is_chosen_by_value_and_cost():
    rng = np.random.default_rng(4)
    value = rng.choice([1.0, 2.0, 5.0], 200)
    cost = rng.choice([0.5, 1.0, 2.0], 200)
    c = catalog(200, value=value, cost=cost)
    plan = select_batch(c, 30.0, np.array([1e9]), slices=Slices(0.0, 0.0, 0.0))
    assert plan.cost.sum() == pytest.approx(30.0)
    taken = np.zeros(200, dtype=bool)
    taken[plan.index] = True
    # equal rates and intervals: the rank is value per cost; the greedy fill spends the
    # budget exactly here (costs are multiples of 0.5), so nothing left out ranks higher
    per_cost = value / cost
    assert per_cost[~taken].max() <= per_cost[taken].min()


def known_and_new(*, new_since=np.nan, n_due=10, n_new=10):
    """``n_due`` known pages just due and ``n_new`` never-fetched ones, alike otherwise."""
    n = n_due + n_new
    since = np.r_[np.full(n_due, 10.0), np.full(n_new, new_since)]
    return Candidates(
        page_ids=np.arange(n, dtype=np.int64),
        hosts=np.zeros(n, dtype=np.int64),
        value=np.ones(n),
        cost=np.ones(n),
        rate=np.full(n, 0.2),
        frequency=np.full(n, 0.1),
        log_std=np.full(n, 0.5),
        days_since_visit=since,
    )


def test_a_first_visit_outranks_the_revisit_of_a_page_alike():
    c = known_and_new()
    plan = select_batch(c, 10.0, np.array([1e9]), slices=Slices(0.0, 0.0, 0.0))
    # a sure gain against a likely one (1 - e^-2 of the same fresh days)
    assert (plan.reason == DISCOVERY).all() and np.isnan(c.days_since_visit[plan.index]).all()


def test_a_due_page_that_buys_more_per_cost_outranks_a_first_visit():
    c = known_and_new()
    value = np.r_[np.full(10, 3.0), np.ones(10)]  # the due pages are worth 3x as much
    c = Candidates(**{**c.__dict__, "value": value})
    plan = select_batch(c, 10.0, np.array([1e9]), slices=Slices(0.0, 0.0, 0.0))
    assert (plan.reason == DUE).all()
    # ... as their priorities say: 3 x (1 - e^-2) > 1
    due_gain = 3.0 * freshness_gain(0.2, 10.0, 10.0)
    assert due_gain > fresh_days_after_visit(0.2, 10.0)


def test_the_discovery_slice_is_a_floor_for_pages_the_prior_rates_poorly():
    # new pages whose prior says they change 50 times a day buy almost nothing by priority
    c = known_and_new(n_due=200, n_new=50)
    rate = np.r_[np.full(200, 0.2), np.full(50, 50.0)]
    c = Candidates(**{**c.__dict__, "rate": rate})
    plan = select_batch(c, 40.0, np.array([1e9]), slices=Slices(0.1, 0.0, 0.0))
    assert plan.spent_by_reason()["discovery"] == pytest.approx(4.0)
    assert plan.spent_by_reason()["due"] == pytest.approx(36.0)


def test_first_visits_come_before_pages_ahead_of_their_interval():
    # everything known was visited a day ago: nothing is due; the new pages come first,
    # then what is left buys pages ahead of their interval
    c = known_and_new(n_due=100, n_new=10)
    since = np.r_[np.full(100, 1.0), np.full(10, np.nan)]
    # the ahead pages would buy more by priority than these first visits (a prior that says
    # 50 changes a day), but they have a schedule and the new pages have none
    rate = np.r_[np.full(100, 5.0), np.full(10, 50.0)]
    c = Candidates(**{**c.__dict__, "days_since_visit": since, "rate": rate})
    plan = select_batch(c, 30.0, np.array([1e9]), slices=Slices(0.0, 0.0, 0.0))
    assert (plan.reason == DISCOVERY).sum() == 10
    assert (plan.reason == AHEAD).sum() == 20 and not (plan.reason == DUE).any()
    ahead = plan.score[plan.reason == AHEAD].min()
    assert ahead > plan.score[plan.reason == DISCOVERY].max()


def once_visited(*, since=4.0, host_intervals=(0, 10)):
    """Two hosts of 10 pages each, every page visited once ``since`` days ago (no interval
    yet), none due (interval 100 days) and none unsure; host ``h`` also has 10 older pages
    that share its ``host_intervals[h]`` observed intervals (visited a day ago)."""
    hosts = np.r_[np.zeros(10), np.ones(10), np.zeros(10), np.ones(10)].astype(np.int64)
    older = np.r_[np.full(10, host_intervals[0] / 10), np.full(10, host_intervals[1] / 10)]
    return Candidates(
        page_ids=np.arange(40, dtype=np.int64),
        hosts=hosts,
        value=np.ones(40),
        cost=np.ones(40),
        rate=np.full(40, 0.2),
        frequency=np.full(40, 0.01),
        log_std=np.full(40, 0.5),
        days_since_visit=np.r_[np.full(20, since), np.ones(20)],
        intervals=np.r_[np.zeros(20), older],
    )


ONLY_REESTIMATION = Slices(0.0, 1.0, 0.0, spend_leftover=False)


def test_a_cold_host_gets_an_early_second_visit():
    """From a cold start a page seen once, on a host that has observed few intervals, is
    revisited after ``cold_reestimate_days`` (not the 30 days of ``reestimate_after_days``),
    so the host's rate is learned early; a host with enough intervals waits."""
    plan = select_batch(once_visited(), 5.0, np.array([100.0, 100.0]), slices=ONLY_REESTIMATION)
    assert plan.index.shape[0] == 5 and (plan.reason == REESTIMATION).all()
    assert set(plan.index.tolist()) <= set(range(10))  # host 0's once-visited pages only
    # the same pages with history (no intervals known: the 30-day rule alone) wait
    history = replace(once_visited(), intervals=None)
    assert (
        select_batch(history, 5.0, np.array([100.0, 100.0]), slices=ONLY_REESTIMATION).index.size
        == 0
    )
    # too early, or a second interval already seen on a warm host: nothing
    early = once_visited(since=ONLY_REESTIMATION.cold_reestimate_days - 1)
    assert (
        select_batch(early, 5.0, np.array([100.0, 100.0]), slices=ONLY_REESTIMATION).index.size == 0
    )
    warm = once_visited(host_intervals=(10, 10))
    assert (
        select_batch(warm, 5.0, np.array([100.0, 100.0]), slices=ONLY_REESTIMATION).index.size == 0
    )


def test_cold_revisits_spread_over_the_hosts_that_know_least():
    # host 0 has no interval, host 1 three (still cold): host 0's pages rank first
    c = once_visited(host_intervals=(0, 3))
    plan = select_batch(c, 12.0, np.array([100.0, 100.0]), slices=ONLY_REESTIMATION)
    assert plan.index.shape[0] == 12
    assert set(plan.index[:10].tolist()) == set(range(10))
    assert (c.hosts[plan.index[10:]] == 1).all()


def test_sharded_selection_keeps_the_cold_start_rule():
    """``models.allocation.shards`` ranks re-estimation per shard with the same rule: hosts
    split over shards (every page of a host in one), the same batch as ``select_batch``."""
    rng = np.random.default_rng(3)
    n, n_hosts = 3000, 60
    hosts = np.sort(rng.integers(0, n_hosts, n))
    known = rng.random(n) < 0.7
    c = Candidates(
        page_ids=np.arange(n, dtype=np.int64),
        hosts=hosts,
        value=rng.choice([1.0, 2.0, 5.0], n),
        cost=np.round(rng.lognormal(0.0, 0.4, n), 2),
        rate=rng.lognormal(-2.0, 1.5, n),
        frequency=rng.uniform(0.001, 0.02, n),
        log_std=rng.uniform(0.0, 1.4, n),  # none unsure: only the cold rule re-estimates
        days_since_visit=np.where(known, rng.uniform(0.0, 20.0, n), np.nan),
        intervals=np.where(rng.random(n) < 0.9, 0.0, 1.0),
    )
    capacity = rng.integers(5, 40, n_hosts).astype(np.float64)
    budget = 0.05 * float(c.cost.sum())
    slices = Slices(reestimation=0.3)
    settings = SelectionSettings(budget, slices, 1.0, 1)
    parts = []
    for k in range(4):
        m = np.flatnonzero(hosts % 4 == k)
        present, local = np.unique(hosts[m], return_inverse=True)
        columns = {
            f.name: getattr(c, f.name)[m]
            for f in fields(c)
            if f.name != "hosts" and getattr(c, f.name) is not None  # no periodic outlook
        }
        parts.append((m, Candidates(**columns, hosts=local.astype(np.int64)), present))
    # shards are laid end to end in the global order: renumber the pages shard by shard
    perm = np.concatenate([m for m, *_ in parts])
    laid = replace(
        c, **{f.name: getattr(c, f.name)[perm] for f in fields(c) if getattr(c, f.name) is not None}
    )
    single = select_batch(laid, budget, capacity, slices=slices, seed=1)
    assert (single.reason == REESTIMATION).sum() > 20  # the cold rule took pages
    offsets = np.cumsum([0] + [m.size for m, *_ in parts])[:-1]
    shards = [
        ShardSelection.start(part, capacity[present], int(off))
        for (_, part, present), off in zip(parts, offsets, strict=True)
    ]
    sharded = select_sharded(LocalShards(shards, settings), settings)
    np.testing.assert_array_equal(sharded.index, single.index)
    np.testing.assert_array_equal(sharded.reason, single.reason)
    np.testing.assert_array_equal(sharded.score, single.score)
