"""The planner's pure core runs on plain numpy arrays (the notebook API), as plan_cycle runs it."""

from __future__ import annotations

import numpy as np
import pytest

from models.estimation.change_rate import estimate_from_moments
from models.estimation.rate_data import PageMoments
from models.planning.core import PlanningPages, plan_from_moments
from models.planning.select import REASONS, PlanningInputError, Slices


def _web(n_hosts: int = 4, per_host: int = 50, seed: int = 3):
    """Half the pages revisited daily for 10 days (fast pages change every visit), half new."""
    rng = np.random.default_rng(seed)
    n = n_hosts * per_host
    hosts = np.repeat(np.arange(n_hosts), per_host).astype(np.int64)
    seen = np.arange(n) % 2 == 0
    fast = rng.random(n) < 0.3
    n_int = np.where(seen, 10, 0)
    n_chg = np.where(seen & fast, 10, np.where(seen, 1, 0))
    unchanged = (n_int - n_chg).astype(float)
    changed = n_chg.astype(float)  # one-day intervals: sums of t, t^2, t^3 all equal the count
    moments = PageMoments.checked(
        np.arange(n) + 100, n_int, n_chg, unchanged, changed, changed, changed
    )
    pages = PlanningPages(
        hosts=hosts,
        value=np.ones(n),
        cost=np.ones(n),
        days_since_visit=np.where(seen, 1.0, np.nan),
    )
    return moments, hosts, pages


def test_the_core_plans_a_batch_from_arrays_in_memory():
    moments, hosts, pages = _web()
    cycle = plan_from_moments(moments, hosts, pages, budget=40.0, host_capacity=np.full(4, 15.0))
    plan = cycle.plan
    assert plan.index.shape[0] == 40 and plan.cost.sum() <= 40.0
    assert np.bincount(hosts[plan.index], minlength=4).max() <= 15  # each host's capacity
    assert set(cycle.page_ids) <= set(moments.page_ids)
    # the estimates are the estimator's own (one code path), the mixture prior by default
    direct = estimate_from_moments(moments, groups=hosts, prior="mixture")
    assert np.array_equal(cycle.estimates.rate, direct.rate)
    assert cycle.estimates.prior_used == "mixture"
    assert {REASONS[r] for r in plan.reason} <= set(REASONS)


def test_the_verification_sample_follows_the_seed():
    moments, hosts, pages = _web()
    verify_only = dict(budget=20.0, host_capacity=np.full(4, 50.0))
    slices = Slices(discovery=0.0, reestimation=0.0, verification=0.5)
    samples = []
    for seed in (1, 2, 1):
        plan = plan_from_moments(
            moments, hosts, pages, slices=slices, seed=seed, **verify_only
        ).plan
        samples.append(set(plan.index[plan.reason == REASONS.index("verification")].tolist()))
    assert samples[0] == samples[2] and samples[0] != samples[1]


def test_only_the_planned_pages_are_planned_but_all_are_estimated():
    moments, hosts, pages = _web()
    keep = np.flatnonzero(np.arange(moments.size) % 3 != 0)
    sub = PlanningPages(
        hosts=hosts[keep],
        value=pages.value[keep],
        cost=pages.cost[keep],
        days_since_visit=pages.days_since_visit[keep],
        planned=keep,
    )
    cycle = plan_from_moments(moments, hosts, sub, budget=30.0, host_capacity=np.full(4, 50.0))
    assert cycle.estimates.rate.shape == (moments.size,)
    assert set(cycle.page_ids.tolist()) <= set(moments.page_ids[keep].tolist())
    assert np.array_equal(cycle.candidates.rate, cycle.estimates.rate[keep])


def test_misaligned_arrays_are_named():
    moments, hosts, pages = _web()
    bad = PlanningPages(
        hosts=hosts,
        value=pages.value[:-1],
        cost=pages.cost,
        days_since_visit=pages.days_since_visit,
    )
    with pytest.raises(PlanningInputError, match="value"):
        plan_from_moments(moments, hosts, bad, budget=10.0, host_capacity=np.full(4, 5.0))
    with pytest.raises(PlanningInputError, match="host codes"):
        plan_from_moments(moments, hosts, pages, budget=10.0, host_capacity=np.full(2, 5.0))
