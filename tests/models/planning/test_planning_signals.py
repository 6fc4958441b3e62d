"""Cheap change signals in the batch: they reorder a host's revisits within its own share."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.planning.select import (
    AHEAD,
    DUE,
    Candidates,
    PlanningInputError,
    select_batch,
)


def candidates(n=1000, seed=0, hosts=10):
    rng = np.random.default_rng(seed)
    since = rng.uniform(0, 10, n)
    since[rng.random(n) < 0.05] = np.nan
    return Candidates(
        page_ids=np.arange(n, dtype=np.int64),
        hosts=rng.integers(0, hosts, n),
        value=rng.choice([1.0, 2.0, 5.0], n),
        cost=rng.uniform(0.5, 2.0, n),
        rate=rng.lognormal(-1, 1, n),
        frequency=rng.choice([0.0, 0.1, 0.5, 1.0], n),
        log_std=rng.uniform(0.1, 2.0, n),
        days_since_visit=since,
    )


def signals(c, informative_hosts, seed=0):
    """Ratios 20 (signalled) or 1/20 (quiet) on the informative hosts' known pages, 1 elsewhere."""
    rng = np.random.default_rng(seed + 1)
    ratio = np.ones(c.size)
    on = np.isin(c.hosts, informative_hosts) & ~np.isnan(c.days_since_visit)
    ratio[on] = np.where(rng.random(int(on.sum())) < 0.3, 20.0, 1 / 20)
    return ratio


def host_pages(plan, c, host):
    return set(plan.index[c.hosts[plan.index] == host].tolist())


@settings(max_examples=40, deadline=None, database=None)
@given(st.integers(0, 10_000), st.floats(10.0, 900.0), st.integers(5, 80))
def test_hosts_whose_signal_says_nothing_get_exactly_their_pages(seed, budget, cap):
    c = candidates(seed=seed)
    capacity = np.full(10, float(cap))
    off = select_batch(c, budget, capacity, seed=seed)
    on = select_batch(c, budget, capacity, seed=seed, change_ratio=signals(c, [0, 1, 2], seed))
    for host in range(3, 10):  # no signal, or one that proved nothing: ratio 1
        assert host_pages(on, c, host) == host_pages(off, c, host)
    # the informative hosts keep their count and spend, the whole batch its limits
    for host in range(3):
        mine_on = c.hosts[on.index] == host
        mine_off = c.hosts[off.index] == host
        assert mine_on.sum() <= mine_off.sum()
        assert on.cost[mine_on].sum() <= off.cost[mine_off].sum() * (1 + 1e-9)
    assert on.cost.sum() <= budget * (1 + 1e-9)
    assert len(np.unique(on.index)) == len(on.index)
    assert (np.bincount(c.hosts[on.index], minlength=10) <= cap).all()


def test_a_signalled_page_replaces_a_quiet_one_on_its_host():
    c = candidates(seed=3)
    capacity = np.full(10, 30.0)
    ratio = signals(c, [0], seed=3)
    off = select_batch(c, 250.0, capacity, seed=3)
    on = select_batch(c, 250.0, capacity, seed=3, change_ratio=ratio)
    host0 = c.hosts == 0
    changed_off = ratio[off.index[host0[off.index]]]
    changed_on = ratio[on.index[host0[on.index]]]
    # the host's revisits now go to the pages its sitemap says changed
    assert (changed_on > 1).mean() > (changed_off > 1).mean() + 0.3
    assert set(on.reason[host0[on.index]].tolist()) <= {DUE, AHEAD, *off.reason.tolist()}
    # and the plan reports the posterior, not the prior probability
    p_on = on.expected_change[host0[on.index] & (ratio[on.index] > 1)]
    assert p_on.size and p_on.mean() > 0.5


def test_all_ratios_one_is_the_plan_without_signals():
    c = candidates(seed=5)
    capacity = np.full(10, 40.0)
    off = select_batch(c, 300.0, capacity, seed=5)
    same = select_batch(c, 300.0, capacity, seed=5, change_ratio=np.ones(c.size))
    assert off.index.tolist() == same.index.tolist()
    assert off.expected_change.tolist() == same.expected_change.tolist()


def test_bad_ratios_are_named():
    c = candidates(seed=1)
    with pytest.raises(PlanningInputError, match="change_ratio"):
        select_batch(c, 10.0, np.full(10, 5.0), change_ratio=np.ones(3))
    with pytest.raises(PlanningInputError, match="change_ratio"):
        select_batch(c, 10.0, np.full(10, 5.0), change_ratio=np.zeros(c.size))
