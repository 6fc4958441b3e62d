"""Choosing one cycle's batch: reserved slices, then due and never-fetched pages by priority.

The allocation says how often each page should be visited; the cycle's batch is what to
fetch now. Reserved slices of the budget come first and buy what a score-driven planner
would never choose (the cost-aware scheduling article):

* verification: a seeded random sample of known pages regardless of score, to check the
  model's assumptions;
* discovery: pages never fetched, by value per cost, whatever their (prior) rate says;
* re-estimation: pages the model has given up on (f = 0) or is unsure of, not visited for
  a while, so a wrong estimate gets corrected; and, from a cold start, an early second
  visit to pages with no interval yet on hosts that have few, so each host's rate is
  learned in days rather than a month (:func:`reestimation_rule`).

Then the rest of the budget goes, by priority (value x fresh days a visit buys / cost),
to two kinds of page ranked together:

* due pages (reason ``due``): the time since the last visit has reached the interval
  ``1 / f`` (within half a cycle). A visit buys ``P(stale now) x (1 - e^(-r I)) / r``
  fresh days over the next interval ``I`` (``freshness_gain``);
* pages never fetched (reason ``discovery``): there is no copy, so a first visit is sure
  to make it fresh and buys ``(1 - e^(-r I)) / r`` (``fresh_days_after_visit``), with the
  rate the estimator gives the page's group and the interval the allocation gives it.

So on a new catalog (every page never fetched) the whole budget is spent on first visits,
up to each host's capacity for the cycle, best value per cost and rate first; and once
the catalog is known, a page discovered later competes with the due pages by the same
measure: its first visit outranks the revisit of a due page alike in rate, value and cost
(a sure gain against a likely one), but not a due page that buys more per unit cost. The
discovery slice is a floor for new pages, not a cap.

What both leave (few pages are due in a cycle right after many visits) buys pages ahead of
their interval, by the same priority (reason ``ahead``; ``Slices.spend_leftover``), so the
cycle's budget is filled as far as the hosts' capacities allow. All selection is
vectorized: a stable sort by score, per-host ranks for the capacities and a cumulative
sum for the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from models.allocation.freshness import fresh_days_after_visit
from models.discovery.lastmod import posterior_change
from models.estimation.periodic import PeriodicOutlook

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

DUE, DISCOVERY, REESTIMATION, VERIFICATION, AHEAD = 0, 1, 2, 3, 4
REASONS = ("due", "discovery", "re-estimation", "verification", "ahead")


class PlanningInputError(ValueError):
    """Candidates or settings that cannot be planned; the message says why."""


@dataclass(frozen=True)
class Slices:
    """Shares of each cycle's budget reserved before the due pages are ranked."""

    discovery: float = 0.05
    reestimation: float = 0.05
    verification: float = 0.02
    #: pages count as unsure when the standard error of their log-rate is at least this
    uncertain_log_std: float = 1.5
    #: re-estimation revisits a page at most this often, in days
    reestimate_after_days: float = 30.0
    #: cold start: a page with ``n`` observed intervals (``n < cold_page_intervals``) on a
    #: host with fewer than ``cold_host_intervals`` is eligible for re-estimation once
    #: ``cold_reestimate_days * 2**n`` days have passed since its last visit (0 disables)
    cold_reestimate_days: float = 3.0
    cold_page_intervals: int = 1
    cold_host_intervals: int = 5
    #: spend what the due pages leave on pages ahead of their interval, by priority
    spend_leftover: bool = True

    def __post_init__(self) -> None:
        shares = (self.discovery, self.reestimation, self.verification)
        if min(shares) < 0 or sum(shares) > 1:
            raise PlanningInputError("slice shares must be >= 0 and add up to at most 1")


@dataclass(frozen=True)
class Candidates:
    """Every page that could be fetched this cycle (arrays aligned by page).

    ``days_since_visit`` is NaN for pages never fetched; ``frequency`` is the allocation's
    visits per day; ``log_std`` the uncertainty of the rate estimate; ``hosts`` are dense
    codes indexing ``host_capacity`` (visits allowed this cycle per host).
    """

    page_ids: IntArray
    hosts: IntArray
    value: FloatArray
    cost: FloatArray
    rate: FloatArray
    frequency: FloatArray
    log_std: FloatArray
    days_since_visit: FloatArray
    #: intervals observed per page (None: not known, so no cold-start re-estimation)
    intervals: FloatArray | None = None
    #: pages planned as periodic (``PeriodicOutlook``: their period, chance of a change
    #: since the last visit and fresh days a visit buys; None: every page is Poisson)
    periodic: PeriodicOutlook | None = None

    @property
    def size(self) -> int:
        return int(self.page_ids.shape[0])


@dataclass(frozen=True)
class CyclePlan:
    """The chosen pages (positions into the candidates) with why, score, gain and cost."""

    index: IntArray
    reason: IntArray
    score: FloatArray
    expected_gain: FloatArray  # fresh days bought (value-weighted for the due slice score)
    expected_change: FloatArray  # probability the page changed since the last visit
    cost: FloatArray
    budget: float

    def spent_by_reason(self) -> dict[str, float]:
        return {
            name: float(self.cost[self.reason == code].sum()) for code, name in enumerate(REASONS)
        }

    def summary(self) -> dict[str, float]:
        spent = float(self.cost.sum())
        changes = float(self.expected_change.sum())
        return {
            "pages": float(self.index.shape[0]),
            "budget": self.budget,
            "spent": spent,
            "expected_fresh_days": float(self.expected_gain.sum()),
            "expected_changes": changes,
            "expected_cost_per_change": spent / changes if changes > 0 else float("inf"),
            **{f"spent_{name}": v for name, v in self.spent_by_reason().items()},
        }


def select_batch(
    candidates: Candidates,
    budget: float,
    host_capacity: FloatArray,
    *,
    slices: Slices | None = None,
    cycle_days: float = 1.0,
    seed: int = 0,
    change_ratio: FloatArray | None = None,
) -> CyclePlan:
    """This cycle's batch: slices first, then due and never-fetched pages by priority, then
    pages ahead of their interval, within the budget and each host's capacity.

    ``change_ratio`` (one per candidate; 1 = no signal) is each page's likelihood ratio of
    having changed since its last visit from cheap signals (a sitemap's lastmod, a feed's
    entry: ``models.discovery.lastmod``). It only reorders a host's revisits within what the
    host got without it (:func:`reorder_by_signal`): a host whose pages all have a ratio of 1
    gets exactly the pages it would have got, whatever the other hosts' signals say.
    """
    c = candidates
    slices = slices or Slices()
    if not np.isfinite(budget) or budget < 0:
        raise PlanningInputError(f"budget must be finite and non-negative, got {budget}")
    if host_capacity.shape[0] <= (int(c.hosts.max()) if c.size else -1):
        raise PlanningInputError("host_capacity needs an entry for every host code")
    if c.size and int(c.hosts.min()) < 0:
        raise PlanningInputError("host codes must be non-negative")
    if c.size and not (c.cost > 0).all():
        raise PlanningInputError("every candidate needs a positive cost")
    known = ~np.isnan(c.days_since_visit)
    since = np.where(known, c.days_since_visit, 0.0)
    with np.errstate(divide="ignore"):
        interval = np.where(c.frequency > 0, 1.0 / c.frequency, np.inf)
    # no copy of a page never fetched: stale for sure, so a first visit buys the whole gain
    p_changed = np.where(known, -np.expm1(-c.rate * since), 1.0)
    gain = p_changed * fresh_days_after_visit(c.rate, np.minimum(interval, 365.0))
    # a periodic page is due once half its consistent phases have passed since its last
    # visit (one phase: the first cycle after the expected change; several: a visit then
    # catches the change or halves the window), priced by the fresh days it then buys
    periodic = known & (c.periodic.period > 0) if c.periodic is not None else None
    if c.periodic is not None and periodic is not None:
        p_changed = np.where(periodic, c.periodic.p_changed, p_changed)
        gain = np.where(periodic, c.periodic.gain, gain)
    rng = np.random.default_rng(seed)

    taken = np.zeros(c.size, dtype=bool)
    reason = np.full(c.size, -1, dtype=np.int64)
    score = np.zeros(c.size)
    used = np.zeros(host_capacity.shape[0])
    remaining = float(budget)

    def take(code: int, eligible: NDArray[np.bool_], scores: FloatArray, share: float) -> None:
        nonlocal remaining
        allowed = min(remaining, share)
        chosen = _fill(eligible & ~taken, scores, c.cost, c.hosts, host_capacity - used, allowed)
        taken[chosen] = True
        reason[chosen] = code
        score[chosen] = scores[chosen]
        np.add.at(used, c.hosts[chosen], 1.0)
        remaining -= float(c.cost[chosen].sum())

    verify_scores = rng.random(c.size)
    take(VERIFICATION, known, verify_scores, slices.verification * budget)
    take(DISCOVERY, ~known, c.value / c.cost, slices.discovery * budget)
    stale, stale_scores = reestimation_rule(c, since, slices, host_capacity.shape[0])
    before = remaining
    take(REESTIMATION, stale, stale_scores, slices.reestimation * budget)
    if c.periodic is not None and c.periodic.probe_period is not None:
        # what the slice leaves tests periodic candidates (``periodic_probes``), longest
        # period first (what knowing it is worth) per value and cost
        left = slices.reestimation * budget - (before - remaining)
        probe = known & periodic_probes(c.periodic, p_changed)
        take(REESTIMATION, probe, c.value * c.periodic.probe_period / c.cost, left)
    # due: the interval has passed, within half a cycle (visits happen at any time of day)
    due = known & (c.frequency > 0) & (since >= interval - 0.5 * cycle_days)
    if periodic is not None:
        due = np.where(periodic, p_changed >= 0.5, due)
    priority = c.value * gain / c.cost
    take(DUE, due | ~known, priority, remaining)
    reason[taken & ~known] = DISCOVERY  # first visits keep their reason, whichever slice
    if slices.spend_leftover:
        take(AHEAD, known & (c.frequency > 0) & (gain > 0), priority, remaining)

    if change_ratio is not None:
        p_changed, gain = apply_change_signals(
            c,
            change_ratio,
            taken,
            reason,
            score,
            p_changed,
            gain,
            cycle_days=cycle_days,
            spend_leftover=slices.spend_leftover,
        )

    index = np.flatnonzero(taken)
    order = np.lexsort((-score[index], reason[index]))
    index = index[order]
    return CyclePlan(
        index=index,
        reason=reason[index],
        score=score[index],
        expected_gain=gain[index],
        expected_change=p_changed[index],
        cost=c.cost[index],
        budget=float(budget),
    )


def periodic_probes(periodic: PeriodicOutlook, p_poisson: FloatArray) -> NDArray[np.bool_]:
    """Periodic candidates a visit now tests best: where their best period leaves the
    outcome a toss-up (a quarter to three quarters of its phases passed: the visit halves
    the window) or predicts it opposite to the Poisson estimate (``p_poisson``, the chance
    of a change since the last visit at the estimated rate: apart by a half or more)."""
    if periodic.probe_period is None or periodic.probe_p_changed is None:
        return np.zeros(periodic.size, dtype=bool)
    p = periodic.probe_p_changed
    on = periodic.probe_period > 0
    with np.errstate(invalid="ignore"):
        split = (p >= 0.25) & (p <= 0.75)
        opposite = np.abs(p - p_poisson) >= 0.5
    out: NDArray[np.bool_] = on & (split | opposite)
    return out


def reestimation_rule(
    c: Candidates, since: FloatArray, slices: Slices, n_hosts: int
) -> tuple[NDArray[np.bool_], FloatArray]:
    """The re-estimation slice's eligible pages and their scores (one home: the sharded
    selection calls it per shard, every page of a host being in one shard).

    Pages the model has given up on or is unsure of, not visited for
    ``reestimate_after_days``, by value x days since the visit / cost; and (cold start,
    when ``c.intervals`` is known) pages with fewer than ``cold_page_intervals`` intervals
    on hosts with fewer than ``cold_host_intervals``, once ``cold_reestimate_days * 2**n``
    days have passed, with the same score divided by one plus the host's intervals, so
    the revisits spread over the hosts that know least.
    """
    known = ~np.isnan(c.days_since_visit)
    unsure = (c.frequency <= 0) | (c.log_std >= slices.uncertain_log_std)
    stale = known & unsure & (since >= slices.reestimate_after_days)
    scores = c.value * since / c.cost
    if c.intervals is None or slices.cold_reestimate_days <= 0:
        return stale, scores
    n = np.asarray(c.intervals, dtype=np.float64)
    host_n = np.bincount(c.hosts, weights=n, minlength=n_hosts)[c.hosts]
    cold = (
        known
        & (n < slices.cold_page_intervals)
        & (host_n < slices.cold_host_intervals)
        & (since >= slices.cold_reestimate_days * np.exp2(n))
    )
    return stale | cold, np.where(cold & ~stale, scores / (1.0 + host_n), scores)


def apply_change_signals(
    c: Candidates,
    change_ratio: FloatArray,
    taken: NDArray[np.bool_],
    reason: NDArray[np.integer[Any]],
    score: FloatArray,
    p_changed: FloatArray,
    gain: FloatArray,
    *,
    cycle_days: float,
    spend_leftover: bool,
) -> tuple[FloatArray, FloatArray]:
    """After the takes: each signalled host's revisits chosen again by its pages' signals
    (:func:`reorder_by_signal`), in place in ``taken``, ``reason`` and ``score``; returns
    ``p_changed`` and ``gain`` with the signalled hosts' posteriors. Host by host, so the
    sharded selection (``models.allocation.shards``) applies it shard by shard and gets the
    same batch."""
    ratio = np.asarray(change_ratio, dtype=np.float64)
    if ratio.shape != (c.size,) or not (ratio > 0).all():
        raise PlanningInputError("change_ratio needs one positive ratio per candidate")
    known = ~np.isnan(c.days_since_visit)
    moved = known & (ratio != 1.0)
    if not moved.any():
        return p_changed, gain
    since = np.where(known, c.days_since_visit, 0.0)
    with np.errstate(divide="ignore"):
        interval = np.where(c.frequency > 0, 1.0 / c.frequency, np.inf)
    due = known & (c.frequency > 0) & (since >= interval - 0.5 * cycle_days)
    posterior = np.where(moved, posterior_change(p_changed, ratio), p_changed)
    base_gain = fresh_days_after_visit(c.rate, np.minimum(interval, 365.0))
    moved_gain = posterior * base_gain
    chosen, stage, redone = reorder_by_signal(
        c,
        taken,
        reason,
        moved,
        ratio,
        due,
        c.value * moved_gain / c.cost,
        spend_leftover=spend_leftover,
    )
    mine = _hosts_of(c.hosts, moved)
    taken[redone] = False
    taken[chosen] = True
    reason[chosen] = np.where(stage == 0, DUE, AHEAD)
    score[chosen] = (c.value * moved_gain / c.cost)[chosen]
    return np.where(mine, posterior, p_changed), np.where(mine, moved_gain, gain)


def reorder_by_signal(
    c: Candidates,
    taken: NDArray[np.bool_],
    reason: NDArray[np.integer[Any]],
    moved: NDArray[np.bool_],
    ratio: FloatArray,
    due: NDArray[np.bool_],
    priority: FloatArray,
    *,
    spend_leftover: bool = True,
) -> tuple[IntArray, IntArray, NDArray[np.bool_]]:
    """A host's revisits chosen again with its pages' signals: the same number and no more
    cost than it got without them, best first.

    Only hosts with a page whose ratio is not 1 (``moved``) are chosen again; their pages the
    slices took (verification, re-estimation) and their first visits stay. The rest of each
    such host's batch (reasons ``due`` and ``ahead``) is replaced by its known pages ranked
    in two stages: first the pages due and not signalled unchanged, and the pages signalled
    changed (ratio > 1), then the others (only with ``spend_leftover``), each stage by
    ``priority`` (value x fresh days a visit buys under the posterior / cost); a host's page
    is taken while the host's count and spend stay within its batch without the signal.
    Returns the chosen positions, their stage (0: due or signalled, 1: ahead) and the pages
    whose place in the batch they replace.
    """
    n_hosts = int(c.hosts.max()) + 1
    mine = _hosts_of(c.hosts, moved)
    known = ~np.isnan(c.days_since_visit)
    redone = mine & taken & known & ((reason == DUE) | (reason == AHEAD))
    count = np.bincount(c.hosts[redone], minlength=n_hosts)
    spend = np.bincount(c.hosts[redone], weights=c.cost[redone], minlength=n_hosts)
    first_stage = (due & (ratio >= 1.0)) | (ratio > 1.0)
    pool = mine & known & ~(taken & ~redone) & (priority > 0)
    if not spend_leftover:
        pool &= first_stage
    cand = np.flatnonzero(pool)
    stage = np.where(first_stage[cand], 0, 1)
    order = np.lexsort((-priority[cand], stage, c.hosts[cand]))
    cand, stage = cand[order], stage[order]
    hosts = c.hosts[cand]
    starts = np.r_[0, np.flatnonzero(np.diff(hosts)) + 1]
    lengths = np.diff(np.r_[starts, cand.shape[0]])
    rank = np.arange(cand.shape[0]) - np.repeat(starts, lengths)
    cum = np.cumsum(c.cost[cand])
    before = np.repeat(np.r_[0.0, cum][starts], lengths)
    keep = (rank < count[hosts]) & (cum - before <= spend[hosts] * (1 + 1e-12))
    return cand[keep], stage[keep], redone


def _hosts_of(hosts: IntArray, pages: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Every page of the hosts that have one of ``pages``."""
    on_host = np.zeros(int(hosts.max()) + 1, dtype=bool)
    on_host[hosts[pages]] = True
    out: NDArray[np.bool_] = on_host[hosts]
    return out


def _fill(
    eligible: NDArray[np.bool_],
    scores: FloatArray,
    cost: FloatArray,
    hosts: IntArray,
    capacity_left: FloatArray,
    budget: float,
    *,
    first_guess: int | None = None,
) -> IntArray:
    """Best-scoring eligible pages within ``budget`` and each host's remaining capacity.

    Pages are ranked by score; a page beyond its host's remaining capacity is skipped;
    the budget is filled greedily: the longest affordable prefix, then, with what is left,
    the best of the remaining pages that still fit, once more.

    The same pages as ranking the whole pool (``_fill_by_full_sort`` in the tests), without
    sorting the whole pool when the budget stops early in it: every step reads only the
    ranking's head (a page's rank on its host counts the pages ranked before it; the cost
    sums are running sums), so the head's answer is the whole pool's once the head holds a
    page the budget cannot take and, with something left, enough cheap pages to use it up.
    A head (``first_guess`` pages, by default what the budget would buy at the pool's mean
    cost, x1.5) is cut from the pool by a partition at its score (with every page tied at
    it); a head that does not settle the answer is taken 4 times longer, and from a quarter
    of the pool on, the pool is sorted whole (where host capacities skip many pages, a head
    that long seldom settles it). (Verification takes 0.4% of 10 M pages:
    sorting them all was 4.7 s of a 9 s selection at load 2.7.)
    """
    pool = np.flatnonzero(eligible)
    n = pool.shape[0]
    if n == 0 or budget <= 0:
        return pool[:0]
    capacity = np.floor(capacity_left + 1e-9)
    neg = -scores[pool]
    if first_guess is None:
        mean_cost = float(cost[pool].mean())
        guess = budget / mean_cost * 1.5 if mean_cost > 0 else float(n)
        first_guess = int(min(guess, float(n))) + 1024
    k = max(int(first_guess), 1)
    while 4 * k < n:
        cut = np.partition(neg, k - 1)[k - 1]
        if np.isnan(cut):  # NaN scores rank last: the head would need them
            break
        head = np.flatnonzero(neg <= cut)  # ascending positions: the stable order's ties
        ranked = pool[head[_stable_argsort(neg[head])]]
        chosen = _fill_ranked(ranked, cost, hosts, capacity, budget, complete=False)
        if chosen is not None:
            return chosen
        k *= 4
    ranked = pool[_stable_argsort(neg)]
    out = _fill_ranked(ranked, cost, hosts, capacity, budget, complete=True)
    assert out is not None
    return out


def _fill_ranked(
    ranked: IntArray,
    cost: FloatArray,
    hosts: IntArray,
    capacity: FloatArray,
    budget: float,
    *,
    complete: bool,
) -> IntArray | None:
    """``_fill`` on the head ``ranked`` of the pool's ranking (all of it if ``complete``):
    the chosen pages, or None when pages beyond the head could change them."""
    page_hosts = hosts[ranked]
    # only hosts with more ranked pages than capacity left need ranks (the others keep all)
    count = np.bincount(page_hosts, minlength=capacity.shape[0])
    on_tight = ~(count <= capacity)[page_hosts]
    if on_tight.any():
        sub = np.flatnonzero(on_tight)
        sub_hosts = page_hosts[sub]
        by_host = _stable_argsort_codes(sub_hosts)
        sorted_hosts = sub_hosts[by_host]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_hosts)) + 1]
        rank_sorted = np.arange(sub.shape[0]) - np.repeat(
            starts, np.diff(np.r_[starts, sub.shape[0]])
        )
        rank = np.empty(sub.shape[0], dtype=np.int64)
        rank[by_host] = rank_sorted
        keep = np.ones(ranked.shape[0], dtype=bool)
        keep[sub] = rank < capacity[sub_hosts]
        ranked = ranked[keep]
    spent = np.cumsum(cost[ranked])
    fits = spent <= budget * (1 + 1e-12)
    if not complete and fits.all():
        return None  # the budget is not spent within the head
    chosen = ranked[fits]
    left = budget - (float(spent[fits][-1]) if fits.any() else 0.0)
    rest = ranked[~fits]
    rest = rest[cost[rest] <= left]
    if left > 0:
        within = np.cumsum(cost[rest]) <= left * (1 + 1e-12)
        if not complete and within.all():
            return None  # cheaper pages beyond the head could still use what is left
        if rest.shape[0]:
            chosen = np.concatenate([chosen, rest[within]])
    return chosen


def _stable_argsort(keys: FloatArray) -> IntArray:
    """``np.argsort(keys, kind="stable")``, from numpy's faster unstable sort (SIMD where
    the CPU has it: 2.5x at 8 M floats here) with tied keys put back in position order.

    With unique keys every sort gives the one order; tied runs (equal keys, -0.0 with 0.0,
    NaN with NaN, as the stable sort ties them) are re-sorted by position. When more than
    an eighth of the keys are tied the stable sort itself is cheaper.
    """
    order = np.argsort(keys)
    n = order.shape[0]
    ranked = keys[order]
    nan = np.isnan(ranked)
    tie = (ranked[1:] == ranked[:-1]) | (nan[1:] & nan[:-1])
    if not tie.any():
        return order
    in_run = np.zeros(n, dtype=bool)
    in_run[1:] |= tie
    in_run[:-1] |= tie
    at = np.flatnonzero(in_run)
    if at.shape[0] > n // 8:
        return np.argsort(keys, kind="stable")
    run = np.cumsum(np.r_[True, ~tie])
    order[at] = order[at[np.lexsort((order[at], run[at]))]]
    return order


def _stable_argsort_codes(codes: IntArray) -> IntArray:
    """``np.argsort(codes, kind="stable")`` for non-negative integer codes: one sort of
    ``code * n + position`` (unique keys, so an unstable SIMD sort gives the stable order;
    4x the stable argsort's speed on 8 M host codes)."""
    n = codes.shape[0]
    if n == 0 or int(codes.max()) >= (1 << 62) // max(n, 1):
        return np.argsort(codes, kind="stable")
    key = codes.astype(np.int64) * n + np.arange(n, dtype=np.int64)
    key.sort()
    out: IntArray = key % n
    return out
