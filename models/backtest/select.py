"""Variants of the cycle's batch selection, measured in the backtest before any shared change.

``models/planning.select_batch`` spends what the due pages leave on pages *ahead* of their
interval, ranked by the freshness a visit buys over a whole interval after it. Right after
a full crawl (and whenever the allocation moves) that budget is large, and the ranking
prefers slow pages: a page due in a month "buys" a month of freshness, though it would
have been visited in a month anyway. :func:`select_with_horizon` ranks those pages by
what the visit buys *before the page would be due anyway* (``interval - days since``):
the probability it is stale now times the fresh time it gains until then.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from models.allocation.freshness import freshness_gain
from models.backtest.policies import fill_in_order
from models.backtest.web import FloatArray, IntArray
from models.planning.select import AHEAD, REESTIMATION, Candidates, Slices, select_batch


def select_with_horizon(
    candidates: Candidates,
    budget: float,
    host_capacity: FloatArray,
    *,
    slices: Slices,
    seed: int,
) -> tuple[IntArray, IntArray]:
    """``select_batch`` without its leftover rule, then the leftover spent by horizon gain."""
    c = candidates
    since = np.nan_to_num(c.days_since_visit, nan=0.0)
    with np.errstate(divide="ignore"):
        interval = np.where(c.frequency > 0, 1.0 / c.frequency, np.inf)
    horizon = np.clip(interval - since, 1.0, 365.0)
    gain = freshness_gain(c.rate, since, horizon)
    score = np.where(gain > 0, c.value * gain / c.cost, np.nan)
    return _leftover_by_score(c, budget, host_capacity, score, slices=slices, seed=seed)


def select_with_probes(
    candidates: Candidates,
    budget: float,
    host_capacity: FloatArray,
    *,
    slices: Slices,
    seed: int,
    probe_share: float = 0.03,
    probe_log_std: float = 1.0,
    probe_min_rate: float = 0.1,
) -> tuple[IntArray, IntArray]:
    """A probe slice first, then ``select_batch`` on the rest of the budget and pages.

    A page that changed at each of a few long intervals may change every few days or
    every hour: long intervals cannot tell, and a revisit a month later (the re-estimation
    slice) cannot either. A revisit one cycle after a visit can. Probes are pages visited
    in the last cycle whose rate is both uncertain (``log_std >= probe_log_std``) and not
    slow (``rate >= probe_min_rate``), by value per cost, within ``probe_share`` of the
    budget. They are reported with the re-estimation reason.
    """
    c = candidates
    since = c.days_since_visit
    eligible = (
        ~np.isnan(since)
        & (np.nan_to_num(since, nan=np.inf) <= 1.5)
        & (c.log_std >= probe_log_std)
        & (c.rate >= probe_min_rate)
    )
    pool = np.flatnonzero(eligible)
    ranked = pool[np.argsort(-(c.value / c.cost)[pool], kind="stable")]
    probes = fill_in_order(ranked, c.hosts, c.cost, host_capacity, probe_share * budget)
    if probes.shape[0] == 0:
        plan = select_batch(c, budget, host_capacity, slices=slices, seed=seed)
        return plan.index, plan.reason
    rest = np.ones(c.size, dtype=bool)
    rest[probes] = False
    keep = np.flatnonzero(rest)
    sub = Candidates(
        page_ids=c.page_ids[keep],
        hosts=c.hosts[keep],
        value=c.value[keep],
        cost=c.cost[keep],
        rate=c.rate[keep],
        frequency=c.frequency[keep],
        log_std=c.log_std[keep],
        days_since_visit=c.days_since_visit[keep],
    )
    used = np.bincount(c.hosts[probes], minlength=host_capacity.shape[0])
    left = budget - float(c.cost[probes].sum())
    plan = select_batch(sub, left, host_capacity - used, slices=slices, seed=seed)
    index = np.concatenate([probes, keep[plan.index]])
    reason = np.concatenate([np.full(probes.shape[0], REESTIMATION, dtype=np.int64), plan.reason])
    return index, reason


def select_nearest_due(
    candidates: Candidates,
    budget: float,
    host_capacity: FloatArray,
    *,
    slices: Slices,
    seed: int,
) -> tuple[IntArray, IntArray]:
    """``select_batch`` without its leftover rule; the leftover goes to the pages nearest
    their due time (largest share of their interval elapsed), so the visits follow the
    allocation's frequencies as closely as the budget allows."""
    c = candidates
    elapsed = np.nan_to_num(c.days_since_visit, nan=0.0) * c.frequency
    return _leftover_by_score(c, budget, host_capacity, elapsed, slices=slices, seed=seed)


def _leftover_by_score(
    c: Candidates,
    budget: float,
    host_capacity: FloatArray,
    score: FloatArray,
    *,
    slices: Slices,
    seed: int,
) -> tuple[IntArray, IntArray]:
    """``select_batch`` without its leftover rule, then what it leaves spent on pages not in
    the batch (visited before, with a frequency, a score that is not NaN), highest score
    first, within the hosts' remaining capacities (reason ``AHEAD``)."""
    plan = select_batch(
        c, budget, host_capacity, slices=replace(slices, spend_leftover=False), seed=seed
    )
    left = budget - float(plan.cost.sum())
    taken = np.zeros(c.size, dtype=bool)
    taken[plan.index] = True
    eligible = ~taken & (c.frequency > 0) & ~np.isnan(c.days_since_visit) & ~np.isnan(score)
    pool = np.flatnonzero(eligible)
    if left <= 0 or pool.shape[0] == 0:
        return plan.index, plan.reason
    ranked = pool[np.argsort(-score[pool], kind="stable")]
    used = np.bincount(c.hosts[plan.index], minlength=host_capacity.shape[0])
    extra = fill_in_order(ranked, c.hosts, c.cost, host_capacity - used, left)
    index = np.concatenate([plan.index, extra])
    reason = np.concatenate([plan.reason, np.full(extra.shape[0], AHEAD, dtype=np.int64)])
    return index, reason
