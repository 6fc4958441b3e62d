import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.planning.select import (
    AHEAD,
    DISCOVERY,
    DUE,
    REESTIMATION,
    VERIFICATION,
    Candidates,
    PlanningInputError,
    Slices,
    select_batch,
)


def candidates(n=1000, seed=0, never=0.1, hosts=20):
    rng = np.random.default_rng(seed)
    since = rng.uniform(0, 10, n)
    since[rng.random(n) < never] = np.nan
    frequency = rng.choice([0.0, 0.1, 0.5, 1.0], n)
    return Candidates(
        page_ids=np.arange(n, dtype=np.int64),
        hosts=rng.integers(0, hosts, n),
        value=rng.choice([1.0, 2.0, 5.0, 10.0], n),
        cost=rng.uniform(0.5, 2.0, n),
        rate=rng.lognormal(-1, 1, n),
        frequency=frequency,
        log_std=rng.uniform(0.1, 2.0, n),
        days_since_visit=since,
    )


@settings(max_examples=60, deadline=None, database=None)
@given(st.integers(0, 10_000), st.floats(0.0, 800.0), st.integers(1, 30))
def test_budget_and_host_capacity_are_never_exceeded(seed, budget, cap):
    c = candidates(seed=seed)
    capacity = np.full(20, float(cap))
    plan = select_batch(c, budget, capacity, seed=seed)
    assert plan.cost.sum() <= budget * (1 + 1e-9)
    assert len(np.unique(plan.index)) == len(plan.index)
    assert (np.bincount(c.hosts[plan.index], minlength=20) <= cap).all()


def test_slices_get_their_share_and_due_pages_go_by_priority():
    c = candidates(n=5000, seed=1)
    budget = 600.0
    slices = Slices(0.1, 0.1, 0.05, reestimate_after_days=5.0)
    plan = select_batch(c, budget, np.full(20, 1e9), slices=slices)
    spent = plan.spent_by_reason()
    assert 0 < spent["verification"] <= 0.05 * budget
    # the discovery slice is a floor, not a cap: first visits also rank with the due pages
    assert spent["discovery"] > 0.09 * budget
    assert 0 < spent["re-estimation"] <= 0.1 * budget
    assert plan.cost.sum() == pytest.approx(budget, rel=0.01)  # the rest fills with due pages
    assert (plan.reason == DISCOVERY).sum() > 0 and (plan.reason == REESTIMATION).sum() > 0
    assert (plan.reason == VERIFICATION).sum() > 0
    assert np.isnan(c.days_since_visit[plan.index[plan.reason == DISCOVERY]]).all()
    assert (plan.reason == DUE).sum() > 0


def test_due_pages_are_taken_best_priority_first():
    from models.allocation.freshness import priority

    base = candidates(n=3000, seed=5, never=0.0)
    # equal costs: the greedy fill is exact, so nothing left out may outrank what is taken
    c = Candidates(**{**base.__dict__, "cost": np.ones(base.size)})
    plan = select_batch(c, 200.0, np.full(20, 1e9), slices=Slices(0.0, 0.0, 0.0))
    assert plan.cost.sum() == 200.0
    since = c.days_since_visit
    interval = np.where(c.frequency > 0, 1.0 / np.where(c.frequency > 0, c.frequency, 1.0), np.inf)
    due = (c.frequency > 0) & (since >= interval - 0.5)
    score = priority(c.value, c.rate, since, c.cost, np.minimum(interval, 365.0))
    taken = np.zeros(c.size, dtype=bool)
    taken[plan.index] = True
    assert (plan.reason == DUE).all() and due[plan.index].all()
    assert score[due & ~taken].max() <= score[taken].min() + 1e-12


def test_unused_slices_flow_to_due_pages():
    c = candidates(n=2000, seed=2, never=0.0)  # nothing to discover
    plan = select_batch(c, 100.0, np.full(20, 1e9), slices=Slices(0.5, 0.0, 0.0))
    assert plan.spent_by_reason()["discovery"] == 0
    assert plan.cost.sum() == pytest.approx(100.0, rel=0.02)


def test_verification_sample_is_reproducible():
    c = candidates(seed=3)
    a = select_batch(c, 200.0, np.full(20, 1e9), seed=7)
    b = select_batch(c, 200.0, np.full(20, 1e9), seed=7)
    np.testing.assert_array_equal(a.index, b.index)


def test_zero_budget_and_bad_input():
    c = candidates()
    assert select_batch(c, 0.0, np.full(20, 5.0)).index.shape == (0,)
    with pytest.raises(PlanningInputError, match="budget"):
        select_batch(c, -1.0, np.full(20, 5.0))
    with pytest.raises(PlanningInputError, match="every host code"):
        select_batch(c, 10.0, np.full(3, 5.0))
    with pytest.raises(PlanningInputError, match="shares"):
        Slices(0.6, 0.6, 0.0)


def test_summary_counts_expected_changes():
    c = candidates(seed=4)
    plan = select_batch(c, 300.0, np.full(20, 1e9))
    s = plan.summary()
    assert s["spent"] == pytest.approx(plan.cost.sum())
    assert s["expected_cost_per_change"] == pytest.approx(s["spent"] / s["expected_changes"])


def test_budget_left_by_the_due_pages_buys_pages_ahead_of_their_interval():
    c = candidates(n=2000, seed=3, never=0.0)
    # everything was visited a few hours ago: nothing is due yet
    c = Candidates(**{**c.__dict__, "days_since_visit": np.full(c.size, 0.2)})
    capacity = np.full(20, 1000.0)
    idle = select_batch(c, 100.0, capacity, slices=Slices(spend_leftover=False))
    assert not (idle.reason == DUE).any() and idle.cost.sum() < 10.0
    full = select_batch(c, 100.0, capacity)
    assert full.cost.sum() <= 100.0 + 1e-9
    assert full.cost.sum() > 100.0 - c.cost.max()  # filled, short of one page at most
    ahead = full.reason == AHEAD
    assert ahead.any() and (c.frequency[full.index[ahead]] > 0).all()
    # ahead pages are taken by the same priority as due ones: best first
    assert (np.diff(full.score[ahead]) <= 1e-12).all()
