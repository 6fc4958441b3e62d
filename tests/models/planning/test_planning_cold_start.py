"""Pages never fetched: a new catalog gets the whole budget; later ones compete with due pages."""

import numpy as np
import pytest

from models.allocation.freshness import fresh_days_after_visit, freshness_gain
from models.planning.select import AHEAD, DISCOVERY, DUE, Candidates, Slices, select_batch


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
