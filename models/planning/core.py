"""The planner's pure core: per-page moments in, this cycle's batch out (no store, no I/O).

``tasks.cycle.planning.plan_cycle`` reads the history's per-page sums and the catalog with
DuckDB, then calls :func:`plan_from_moments`; the policy backtest's deployed planner
(``models.backtest.policies.DeployedPlannerPolicy``) calls the same function on the
sums its own simulated fetches gave; a notebook calls it on plain arrays. One code path:

1. estimate every page's rate from its moments (``estimate_from_moments(groups=...,
   prior=...)``, the mixture prior by default, with its fallbacks);
2. allocate what the reserved slices leave of the budget (``allocate``: value-weighted
   freshness per cost, per-host capacity, at most one visit per page per cycle);
3. select the cycle's batch (``select_batch``: slices, due and never-fetched pages by
   priority, leftover ahead of schedule), its verification sample seeded by ``seed``; with
   cheap change signals (``PlanningPages.change_ratio``), each host's revisits reordered by
   them within the host's own share.

Estimation runs over every page given (``moments``); allocation and selection over the
``planned`` positions only (a page known by another URL is estimated, so its evidence
counts for its group's prior, but not planned on its own).

>>> import numpy as np
>>> from models.estimation.rate_data import PageMoments
>>> n = 4
>>> moments = PageMoments.checked(np.arange(n), [3, 3, 0, 0], [3, 0, 0, 0],
...                               [0.0, 3.0, 0.0, 0.0], [3.0, 0, 0, 0], [3.0, 0, 0, 0],
...                               [3.0, 0, 0, 0])
>>> pages = PlanningPages(hosts=np.zeros(n, dtype=np.int64), value=np.ones(n),
...     cost=np.ones(n), days_since_visit=np.array([1.0, 1.0, np.nan, np.nan]))
>>> cycle = plan_from_moments(moments, np.zeros(n, dtype=np.int64), pages, budget=2.0,
...                           host_capacity=np.array([10.0]))
>>> int(cycle.plan.index.shape[0])
2
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.allocation.allocate import Allocation, allocate
from models.allocation.freshness import FRESHNESS, Objective
from models.estimation.change_rate import PriorChoice, estimate_from_moments
from models.estimation.periodic import PeriodicOutlook
from models.estimation.rate_data import PageMoments, RateEstimates
from models.planning.select import (
    Candidates,
    CyclePlan,
    PlanningInputError,
    Slices,
    select_batch,
)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

__all__ = ["PlannedCycle", "PlanningPages", "plan_from_moments"]


@dataclass(frozen=True)
class PlanningPages:
    """What the planner knows of the pages it may fetch (arrays aligned with ``planned``).

    ``hosts`` are integer codes indexing ``host_capacity``; ``value`` and ``cost`` (> 0)
    per page; ``days_since_visit`` NaN for a page never fetched. ``planned`` are the
    positions of these pages among the estimated ones (default: all, in order);
    ``page_ids`` name them in the plan (default: the moments' ``page_ids`` at ``planned``).
    ``change_ratio`` is each page's likelihood ratio of having changed since its last visit
    from cheap signals (sitemap lastmod, feed entries; 1 = none), under each host's learned
    trust (``models.discovery.lastmod``): it reorders a host's revisits within what the host
    gets without it (``select_batch``), so a host whose signal proved nothing is planned
    exactly as without one. None: no signal.
    """

    hosts: IntArray
    value: FloatArray
    cost: FloatArray
    days_since_visit: FloatArray
    planned: IntArray | None = None
    page_ids: IntArray | None = None
    change_ratio: FloatArray | None = None
    #: detected periodic pages (``models.estimation.periodic.outlook``; None: none)
    periodic: PeriodicOutlook | None = None

    @property
    def size(self) -> int:
        return int(self.hosts.shape[0])


@dataclass(frozen=True)
class PlannedCycle:
    """One cycle planned: every page's estimates, the allocation and the batch.

    ``plan.index`` are positions into ``candidates`` (the planned pages), so
    ``candidates.page_ids[plan.index]`` are the pages to fetch.
    """

    estimates: RateEstimates
    allocation: Allocation
    candidates: Candidates
    plan: CyclePlan

    @property
    def page_ids(self) -> IntArray:
        """The batch's page ids, in the plan's order."""
        out: IntArray = self.candidates.page_ids[self.plan.index]
        return out


def plan_from_moments(
    moments: PageMoments,
    groups: ArrayLike,
    pages: PlanningPages,
    budget: float,
    host_capacity: ArrayLike,
    *,
    cycle_days: float = 1.0,
    slices: Slices | None = None,
    seed: int = 0,
    prior: PriorChoice = "mixture",
    objective: Objective = FRESHNESS,
) -> PlannedCycle:
    """Estimate, allocate and select one cycle, as the daily deployment does.

    ``budget`` is the cycle's budget in cost units, ``host_capacity`` the visits each host
    allows per cycle (one entry per host code), ``cycle_days`` the cycle's length in days.
    ``groups`` gives each estimated page's smoothing group (the catalog's group, else its
    host, in the deployment). Raises ``PlanningInputError`` on misaligned arrays.
    """
    slices = slices or Slices()
    capacity = np.asarray(host_capacity, dtype=np.float64)
    planned = (
        np.arange(moments.size, dtype=np.int64)
        if pages.planned is None
        else np.asarray(pages.planned, dtype=np.int64)
    )
    _check(moments, pages, planned, capacity)
    estimates = estimate_from_moments(moments, groups=groups, prior=prior)
    rate = estimates.rate[planned]
    due_budget = budget * (1 - slices.discovery - slices.reestimation - slices.verification)
    allocation, periodic = _allocate(
        rate, due_budget, pages, capacity, cycle_days=cycle_days, objective=objective
    )
    candidates = Candidates(
        page_ids=moments.page_ids[planned] if pages.page_ids is None else pages.page_ids,
        hosts=pages.hosts,
        value=pages.value,
        cost=pages.cost,
        rate=rate,
        frequency=allocation.frequencies,
        log_std=estimates.log_std[planned],
        days_since_visit=pages.days_since_visit,
        intervals=(moments.n_intervals + moments.ages()[0])[planned].astype(np.float64),
        periodic=periodic,
    )
    plan = select_batch(
        candidates,
        budget,
        capacity,
        slices=slices,
        cycle_days=cycle_days,
        seed=seed,
        change_ratio=pages.change_ratio,
    )
    return PlannedCycle(estimates, allocation, candidates, plan)


def _allocate(
    rate: FloatArray,
    due_budget: float,
    pages: PlanningPages,
    capacity: FloatArray,
    *,
    cycle_days: float,
    objective: Objective,
) -> tuple[Allocation, PeriodicOutlook | None]:
    """The allocation, with each detected periodic page worth it pinned at one visit a
    period (``pages.periodic``); returns the outlook of the pinned pages only.

    A periodic page visited on the first cycle after each change is fresh for its period
    but about half a cycle, at one visit's cost a period: value x (P - cycle / 2) / cost per
    unit of budget, against the budget's shadow price of the allocation without the pins
    (``Allocation.multiplier``, the value a unit of budget buys at the margin). Pages that
    clear it are pinned, best first, while their spend stays within half the budget and
    each host's pinned visits within half its capacity; the rest get the allocation's
    frequencies for the other pages (and the candidates to probe stay in the outlook)."""
    hosts_cap = _per_present_host(pages.hosts, capacity) / cycle_days
    budget = due_budget / cycle_days

    def solve(low: FloatArray | float, high: FloatArray | float) -> Allocation:
        return allocate(
            rate,
            budget,
            weights=pages.value,
            costs=pages.cost,
            hosts=pages.hosts,
            host_capacity=hosts_cap,
            min_frequency=low,
            max_frequency=high,
            objective=objective,
        )

    first = solve(0.0, 1.0 / cycle_days)
    per = pages.periodic
    if per is None or not (per.period > 0).any():
        return first, per  # no page to pin; the candidates to probe stay
    on = per.period > 0
    period = np.where(on, per.period, np.inf)
    worth = np.where(on, pages.value * (period - 0.5 * cycle_days) / pages.cost, 0.0)
    pinned = on & (worth >= first.multiplier)
    order = np.flatnonzero(pinned)[np.argsort(-worth[pinned], kind="stable")]
    spend = np.cumsum(pages.cost[order] / period[order])
    order = order[spend <= 0.5 * budget]
    _, host_codes = np.unique(pages.hosts, return_inverse=True)
    load = np.zeros(hosts_cap.shape[0])
    np.add.at(load, host_codes[order], 1.0 / period[order])
    order = order[(load <= 0.5 * hosts_cap)[host_codes[order]]]
    keep = np.zeros(on.shape[0], dtype=bool)
    keep[order] = True
    if not keep.any():
        return first, per.only(keep)
    fixed = np.where(keep, 1.0 / period, 0.0)
    return solve(fixed, np.where(keep, fixed, 1.0 / cycle_days)), per.only(keep)


def _per_present_host(hosts: IntArray, capacity: FloatArray) -> FloatArray:
    """``allocate`` takes one capacity per distinct host label, in sorted order."""
    out: FloatArray = capacity[np.unique(hosts)] if hosts.shape[0] else capacity[:0]
    return out


def _check(moments: PageMoments, pages: PlanningPages, planned: IntArray, cap: FloatArray) -> None:
    n = pages.size
    for name in ("value", "cost", "days_since_visit"):
        if np.asarray(getattr(pages, name)).shape != (n,):
            raise PlanningInputError(f"{name} must have one entry per planned page ({n})")
    if planned.shape != (n,):
        raise PlanningInputError(f"planned must have one position per planned page ({n})")
    if n and (planned.min() < 0 or planned.max() >= moments.size):
        raise PlanningInputError("planned positions must index the estimated pages")
    if pages.page_ids is not None and pages.page_ids.shape != (n,):
        raise PlanningInputError(f"page_ids must have one entry per planned page ({n})")
    if pages.periodic is not None and pages.periodic.size != n:
        raise PlanningInputError(f"periodic must have one entry per planned page ({n})")
    if pages.change_ratio is not None and np.asarray(pages.change_ratio).shape != (n,):
        raise PlanningInputError(f"change_ratio must have one entry per planned page ({n})")
    if n and (pages.hosts.min() < 0 or pages.hosts.max() >= cap.shape[0]):
        raise PlanningInputError("host codes must index host_capacity")
