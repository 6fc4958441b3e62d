"""Sharded allocation: the budget's multiplier found from each host shard's spend.

The allocation problem (:mod:`models.allocation.allocate`) couples pages only through the
budget's multiplier ``mu`` and each host's capacity only through its own ``nu_h``: at a
given ``mu`` every host's multiplier, and so every page's frequency, follows from that
host's pages alone. Split the pages by host into shards (every page of a host in one
shard) and each shard answers, on its own, "what do you spend at ``mu``, and how fast does
that fall" (:func:`shard_point`, a pass over the shard with its binding hosts solved, by
the single-process solver's own host search); the driver sums the shards' answers and
finds ``mu`` (:func:`solve_multiplier`), then every shard computes its frequencies at
that ``mu`` (:func:`shard_frequencies`). Nothing per page crosses a shard's boundary: the
driver holds a few floats per shard.

Tolerance. The driver stops when the summed spend is within ``BUDGET_TOLERANCE`` (1e-13)
of the budget, and every shard solves its binding hosts to ``HOST_TOLERANCE`` (1e-13) of
their capacities: a hundred times tighter than the single-process solver's 1e-11
(``models.allocation.solver.TOLERANCE``), so the sharded answer sits within the
single-process answer's own error of the exact optimum. Where float64 cannot resolve
``mu`` further (the spend jumps across one ulp of ``mu``: pages on their give-up ramp)
the frequencies at both ends of the last bracket are mixed with one weight, so the budget
is spent exactly, as the single-process solver does.

The batch is selected shard-wise too (below, :func:`select_sharded`): the same pages as
``models.planning.select.select_batch`` on all the shards' candidates laid end to end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from models.allocation.freshness import fresh_days_after_visit
from models.allocation.problem import AllocationInputError, AllocationProblem
from models.allocation.solver import _HostSolver, page_scale
from models.planning.select import (
    AHEAD,
    DISCOVERY,
    DUE,
    REESTIMATION,
    VERIFICATION,
    Candidates,
    CyclePlan,
    Slices,
    apply_change_signals,
    reestimation_rule,
)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: relative gap accepted between the shards' summed spend and the budget
BUDGET_TOLERANCE = 1e-13
#: relative gap accepted between a binding host's load and its capacity, in every shard
HOST_TOLERANCE = 1e-13
_MAX_STEPS = 200


@dataclass(frozen=True)
class ShardPoint:
    """One shard at one budget multiplier: what it spends, d spend / d mu, its floor.

    ``spend`` and ``slope`` have the shard's binding hosts solved (their multipliers follow
    ``mu``); ``floor`` is the shard's spend at every page's minimum frequency and
    ``typical`` a multiplier at which a typical page of the shard stops being worth a
    visit (the driver's start when the spend at 0 has no useful slope).
    """

    spend: float
    slope: float
    floor: float
    typical: float
    pages: int


@dataclass(frozen=True)
class BudgetRoot:
    """The budget's multiplier, as the shards apply it.

    Frequencies are ``f(high) + theta * (f(low) - f(high))``: ``low <= high`` bracket the
    root (``low`` spends at least the budget, ``high`` at most); ``theta`` is 0 when the
    root was resolved (``low == high``). ``high = inf`` means nothing beyond the minimum
    frequencies is affordable; ``high = 0`` that the budget does not bind.
    """

    low: float
    high: float
    theta: float
    spent: float
    steps: int

    @property
    def multiplier(self) -> float:
        return self.high


#: the driver's view of the shards: (budget multiplier, host capacities solved?) -> one
#: point per shard
SpendOracle = Callable[[float, bool], Sequence[ShardPoint]]


@dataclass(frozen=True)
class HostWarmth:
    """A shard's last host multipliers and how they moved with ``mu``: the next trial's
    start (the host searches take a few steps from it instead of tens from zero)."""

    mu: float
    nu: FloatArray
    nu_slope: FloatArray


def shard_point(
    problem: AllocationProblem,
    mu: float,
    *,
    with_hosts: bool = True,
    warm: HostWarmth | None = None,
    tolerance: float = HOST_TOLERANCE,
) -> tuple[ShardPoint, HostWarmth | None]:
    """The shard's spend at budget multiplier ``mu``, its binding hosts solved (or, if not
    ``with_hosts``, capacities ignored: one pass), and the warmth for its next trial.

    ``problem`` holds the shard's pages only (whole hosts); its ``budget`` is not used.
    ``warm`` (from the shard's previous trial) changes how fast the host searches end,
    not where (each to ``tolerance`` of its capacity).
    """
    p = problem
    floor = float(np.sum(p.costs * p.min_frequency))
    scale = page_scale(p)
    useful = np.isfinite(scale) & (scale > 0)
    typical = float(np.median(1.0 / (p.costs[useful] * scale[useful]))) if useful.any() else 0.0
    if not np.isfinite(mu):
        return ShardPoint(floor, 0.0, floor, typical, p.size), warm
    solver = _HostSolver(p, scale, tolerance)
    if warm is not None and warm.nu.shape == solver.nu.shape:
        solver.mu, solver.nu, solver.nu_slope = warm.mu, warm.nu, warm.nu_slope
    point = solver.evaluate(mu, with_hosts=with_hosts)
    after = HostWarmth(solver.mu, solver.nu, solver.nu_slope) if with_hosts else warm
    return ShardPoint(point.spend, point.slope, floor, typical, p.size), after


def shard_frequencies(
    problem: AllocationProblem,
    root: BudgetRoot,
    *,
    warm: HostWarmth | None = None,
    tolerance: float = HOST_TOLERANCE,
) -> FloatArray:
    """The shard's frequencies at the driver's root (mixed across its bracket if need be)."""
    p = problem
    if not np.isfinite(root.high):
        return p.min_frequency.copy()
    scale = page_scale(p)

    def at(mu: float) -> FloatArray:
        solver = _HostSolver(p, scale, tolerance)
        if warm is not None and warm.nu.shape == solver.nu.shape:
            solver.mu, solver.nu, solver.nu_slope = warm.mu, warm.nu, warm.nu_slope
        return solver.evaluate(mu).frequencies

    high = at(root.high)
    if root.theta == 0.0 or root.low == root.high:
        return high
    return np.asarray(high + root.theta * (at(root.low) - high), dtype=np.float64)


def solve_multiplier(
    oracle: SpendOracle, budget: float, *, tolerance: float = BUDGET_TOLERANCE
) -> BudgetRoot:
    """The budget's multiplier from the shards' spends: safeguarded Newton on log mu.

    Each step asks every shard once (``oracle``). First without host capacities (one
    cheap pass per shard and step) to 1e-4: capacities only lower the spend, so that root
    bounds the real one from above and starts it close. Then with them, to ``tolerance``
    relative to the budget; far below the start, ``mu = 0`` is tried (capacities alone
    may keep the spend within the budget). See :func:`_root`.
    """
    if not np.isfinite(budget) or budget < 0:
        raise AllocationInputError(f"budget must be a finite non-negative number, got {budget}")
    free = oracle(0.0, False)
    spend0 = math.fsum(s.spend for s in free)
    floor = math.fsum(s.floor for s in free)
    if spend0 <= budget * (1 + tolerance):  # the budget does not bind, even without capacities
        return BudgetRoot(0.0, 0.0, 0.0, math.fsum(s.spend for s in oracle(0.0, True)), 2)
    if budget <= floor * (1 + 1e-12):  # nothing beyond the minimums is affordable
        return BudgetRoot(np.inf, np.inf, 0.0, floor, 1)
    typical = [s.typical for s in free if s.typical > 0]
    if not typical:
        raise AllocationInputError("no page can gain from a visit (all rates or weights are 0)")
    x = math.log(float(np.median(typical)))
    start = _root(lambda mu: oracle(mu, False), budget, x, -math.inf, 1e-4)
    x = math.log(start.high) if start.high > 0 else x
    root = _root(lambda mu: oracle(mu, True), budget, x, x - 40.0, tolerance)
    return BudgetRoot(root.low, root.high, root.theta, root.spent, 1 + start.steps + root.steps)


def _root(
    evaluate: Callable[[float], Sequence[ShardPoint]],
    budget: float,
    x: float,
    x_floor: float,
    tolerance: float,
) -> BudgetRoot:
    """Newton on log mu with the summed slopes (the secant through the last two points
    once there are two: the exact slope misses the spend's kinks) until two points bracket
    the root, then inside the bracket, bisecting in log mu when a step leaves it or two
    steps in a row do not halve the gap. Below ``x_floor``, ``mu = 0``. Stops at
    ``tolerance``, or when float64 cannot split the bracket (the ends are then mixed).
    """
    lo, hi = -math.inf, math.inf  # log mu spending too much / too little
    spend_lo, spend_hi = math.inf, -math.inf
    gap_lo, gap_hi = math.nan, math.nan
    kept = 0  # which end the last step kept (Illinois): 1 lo, -1 hi
    last_gap = math.inf
    stalls = 0  # steps in a row that did not halve the gap
    previous: tuple[float, float] | None = None  # (log mu, gap) of the last step
    steps = 0
    for _ in range(_MAX_STEPS):
        mu = math.exp(x) if x > x_floor else 0.0
        points = evaluate(mu)
        steps += 1
        spend = math.fsum(s.spend for s in points)
        if abs(spend / budget - 1.0) <= tolerance or (mu == 0.0 and spend < budget):
            return BudgetRoot(mu, mu, 0.0, spend, steps)
        # the gap in logs: the spend falls over decades of mu, about linearly in log-log
        gap = math.log(spend / budget) if spend > 0 else -math.inf
        if gap > 0:
            if kept == 1:
                gap_hi *= 0.5
            lo, spend_lo, gap_lo, kept = x, spend, gap, 1
        else:
            if kept == -1:
                gap_lo *= 0.5
            hi, spend_hi, gap_hi, kept = x, spend, gap, -1
        bracketed = math.isfinite(lo) and math.isfinite(hi)
        if bracketed and hi - lo <= 4e-16 * max(1.0, abs(x)):
            break
        d_gap = mu * math.fsum(s.slope for s in points) / spend if spend > 0 else 0.0
        if previous is not None and previous[1] != gap and mu > 0:
            d_gap = (gap - previous[1]) / (x - previous[0])
        previous = (x, gap)
        newton = x - gap / d_gap if d_gap < 0 else math.nan
        slow = abs(gap) > 0.5 * last_gap
        stalls = stalls + 1 if slow else 0
        if bracketed:
            secant = (lo * gap_hi - hi * gap_lo) / (gap_hi - gap_lo)
            if lo < newton < hi and not slow:
                target = newton
            elif lo < secant < hi and stalls < 2:
                target = secant
            else:
                target = 0.5 * (lo + hi)
        else:
            step = newton - x if d_gap < 0 else (4.0 if gap > 0 else -4.0)
            target = x + min(max(step, -8.0), 8.0)
            if not lo < target < hi:
                target = x + (4.0 if gap > 0 else -4.0)
        last_gap = abs(gap)
        x = max(target, x_floor)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise AllocationInputError("could not bracket the budget multiplier")
    theta = min(max((budget - spend_hi) / (spend_lo - spend_hi), 0.0), 1.0)
    return BudgetRoot(
        math.exp(lo), math.exp(hi), theta, spend_hi + theta * (spend_lo - spend_hi), steps
    )


# --------------------------------------------------------------------------- selection
#
# ``models.planning.select.select_batch`` fills each reserved slice, then the due pages,
# then the pages ahead, by one rule (``_fill``): rank the eligible pages by score (ties by
# position), drop those past their host's remaining capacity, take the longest prefix whose
# cumulated cost fits the slice, then, with what is left, the cheap pages after it that
# still fit. Host capacities are local to a shard; only the budget is global. So the
# driver finds, per slice, the page where the global prefix stops, from a few numbers per
# shard: each shard's scores at G cost quantiles of its own ranking (the *knots*), then
# every shard's cost up to each knot (so the stop lies between two adjacent knots, where
# each shard holds at most 1/G of the slice), then the pages of that band, then the cheap
# pages after the stop. Pages are ordered by the key (-score, global position), the order
# ``select_batch``'s stable sort gives them, so the same pages come out.

#: knots per shard and slice: a band holds at most 1/KNOTS of a slice per shard
KNOTS = 256


@dataclass
class SelectionState:
    """What the selection has taken of one shard so far (per page, and per host)."""

    taken: NDArray[np.bool_]
    reason: NDArray[np.int8]  # a take's code (models.planning.select), -1 where not taken
    score: FloatArray
    used: FloatArray

    @classmethod
    def start(cls, pages: int, hosts: int) -> SelectionState:
        return cls(
            np.zeros(pages, dtype=bool),
            np.full(pages, -1, dtype=np.int8),
            np.zeros(pages),
            np.zeros(hosts),
        )


@dataclass
class ShardSelection:
    """One shard's candidates and its :class:`SelectionState`.

    ``offset`` is the global position of the shard's first page (shards are laid end to
    end in the global order); ``host_capacity`` is per shard host code (visits this cycle).
    """

    candidates: Candidates
    host_capacity: FloatArray
    offset: int
    state: SelectionState
    #: each candidate's likelihood ratio of a change from cheap signals (``select_batch``'s
    #: ``change_ratio``); None: no signals
    change_ratio: FloatArray | None = None

    @classmethod
    def start(
        cls,
        candidates: Candidates,
        host_capacity: FloatArray,
        offset: int,
        change_ratio: FloatArray | None = None,
    ) -> ShardSelection:
        capacity = np.asarray(host_capacity, dtype=np.float64)
        state = SelectionState.start(candidates.size, capacity.shape[0])
        return cls(candidates, capacity, int(offset), state, change_ratio)


@dataclass(frozen=True)
class SelectionSettings:
    """What ``select_batch`` is called with besides the candidates (the same everywhere)."""

    budget: float
    slices: Slices
    cycle_days: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class Ranked:
    """A shard's pool for one take, in key order: local index, score, global position,
    cost and host code of each page."""

    index: IntArray
    score: FloatArray
    position: IntArray
    cost: FloatArray
    host: IntArray


@dataclass(frozen=True)
class Band:
    """Pages (score, global position, cost) sent to the driver, in key order per shard."""

    score: FloatArray
    position: IntArray
    cost: FloatArray

    @staticmethod
    def merge(parts: Sequence[Band]) -> Band:
        score = np.concatenate([p.score for p in parts]) if parts else np.zeros(0)
        position = np.concatenate([p.position for p in parts]) if parts else np.zeros(0, np.int64)
        cost = np.concatenate([p.cost for p in parts]) if parts else np.zeros(0)
        order = np.lexsort((position, -score))
        return Band(score[order], position[order], cost[order])


@dataclass(frozen=True)
class Cut:
    """The driver's decision for one take: every pool page with key up to ``last`` (a
    one-page :class:`Band`; empty: none), or every pool page if ``everything``, plus the
    pages at the global positions ``extra`` (the second greedy pass)."""

    code: int
    last: Band
    everything: bool
    extra: IntArray


#: the order of the takes, as in ``select_batch``
TAKES = (VERIFICATION, DISCOVERY, REESTIMATION, DUE, AHEAD)


def _page_terms(
    c: Candidates, cycle_days: float
) -> tuple[NDArray[np.bool_], FloatArray, FloatArray, FloatArray, FloatArray]:
    """known, since, interval, p_changed and gain, as ``select_batch`` computes them."""
    known = ~np.isnan(c.days_since_visit)
    since = np.where(known, c.days_since_visit, 0.0)
    with np.errstate(divide="ignore"):
        interval = np.where(c.frequency > 0, 1.0 / c.frequency, np.inf)
    p_changed = np.where(known, -np.expm1(-c.rate * since), 1.0)
    gain = p_changed * fresh_days_after_visit(c.rate, np.minimum(interval, 365.0))
    return known, since, interval, p_changed, gain


def _slice_rule(
    shard: ShardSelection, code: int, settings: SelectionSettings
) -> tuple[NDArray[np.bool_], FloatArray]:
    """The eligible pages of the shard for take ``code`` and their scores."""
    c, s = shard.candidates, settings.slices
    known, since, interval, _, gain = _page_terms(c, settings.cycle_days)
    if code == VERIFICATION:  # the global stream's draws at the shard's positions
        bits = np.random.PCG64(settings.seed)  # what default_rng(seed) draws from
        bits.advance(shard.offset)
        return known, np.random.Generator(bits).random(c.size)
    if code == DISCOVERY:
        return ~known, c.value / c.cost
    if code == REESTIMATION:
        return reestimation_rule(c, since, s, shard.host_capacity.shape[0])
    priority = c.value * gain / c.cost
    if code == DUE:
        due = known & (c.frequency > 0) & (since >= interval - 0.5 * settings.cycle_days)
        return due | ~known, priority
    return known & (c.frequency > 0) & (gain > 0), priority


def rank_shard(shard: ShardSelection, code: int, settings: SelectionSettings) -> Ranked:
    """The shard's pool for take ``code``: eligible, not taken, within host capacity,
    in key order (``select_batch``'s ``_fill`` before its budget cut)."""
    eligible, scores = _slice_rule(shard, code, settings)
    c = shard.candidates
    pool = np.flatnonzero(eligible & ~shard.state.taken)
    pool = pool[np.argsort(-scores[pool], kind="stable")]
    hosts = c.hosts[pool]
    by_host = np.argsort(hosts, kind="stable")
    sorted_hosts = hosts[by_host]
    starts = (
        np.r_[0, np.flatnonzero(np.diff(sorted_hosts)) + 1] if pool.size else np.zeros(0, np.int64)
    )
    rank = np.empty(pool.shape[0], dtype=np.int64)
    rank[by_host] = np.arange(pool.shape[0]) - np.repeat(
        starts, np.diff(np.r_[starts, pool.shape[0]])
    )
    left = shard.host_capacity - shard.state.used
    keep = rank < np.floor(left[hosts] + 1e-9)
    pool = pool[keep]
    return Ranked(pool, scores[pool], pool + shard.offset, c.cost[pool], hosts[keep])


def shard_knots(ranked: Ranked, allowed: float, knots: int = KNOTS) -> Band:
    """The shard's pages where its own cumulated cost first reaches q/``knots`` of
    ``allowed`` (q = 1..knots), and its first page past ``allowed``, else its last page."""
    if ranked.index.shape[0] == 0:
        return Band(np.zeros(0), np.zeros(0, np.int64), np.zeros(0))
    cum = np.cumsum(ranked.cost)
    marks = allowed * np.arange(1, knots + 1) / knots
    at = np.unique(np.minimum(np.searchsorted(cum, marks, side="left"), cum.shape[0] - 1))
    past = np.searchsorted(cum, allowed * (1 + 1e-12), side="right")
    at = np.unique(np.r_[at, min(past, cum.shape[0] - 1)])
    return Band(ranked.score[at], ranked.position[at], cum[at])


def _upto(ranked: Ranked, score: FloatArray, position: IntArray) -> IntArray:
    """For each key (score, position), how many of the ranked pages come at or before it.

    Binary searches on the ranked pages (sorted by key): pages scoring more, then, within
    a run of equal scores, those at or before the position.
    """
    negative = -ranked.score
    above = np.searchsorted(negative, -score, side="left")
    through = np.searchsorted(negative, -score, side="right")
    out = above.astype(np.int64)
    for i in np.flatnonzero(through > above):  # ties: one search per key, not per page
        run = ranked.position[above[i] : through[i]]
        out[i] += int(np.searchsorted(run, position[i], side="right"))
    return out


def shard_cost_upto(ranked: Ranked, keys: Band) -> FloatArray:
    """The shard's cost of its pages at or before each key (keys from every shard)."""
    count = _upto(ranked, keys.score, keys.position)
    cum = np.r_[0.0, np.cumsum(ranked.cost)]
    return np.asarray(cum[count], dtype=np.float64)


def shard_band(ranked: Ranked, after: Band, upto: Band) -> Band:
    """The shard's pages after key ``after`` (none: from the top) and up to ``upto`` (none:
    to the end), each a one-page :class:`Band`."""
    lo = int(_upto(ranked, after.score, after.position)[0]) if after.score.size else 0
    n = ranked.index.shape[0]
    hi = int(_upto(ranked, upto.score, upto.position)[0]) if upto.score.size else n
    part = slice(lo, max(lo, hi))
    return Band(ranked.score[part], ranked.position[part], ranked.cost[part])


def shard_cheap_after(ranked: Ranked, last: Band, left: float) -> Band:
    """The shard's pages after ``last`` that cost at most ``left``, while their cumulated
    cost fits ``left``, and the first that does not: every page the second greedy pass
    could take from this shard, and the one where the global pass must stop."""
    start = int(_upto(ranked, last.score, last.position)[0]) if last.score.size else 0
    cost = ranked.cost[start:]
    cheap = np.flatnonzero(cost <= left)
    fits = int(np.searchsorted(np.cumsum(cost[cheap]), left * (1 + 1e-12), side="right"))
    at = start + cheap[: fits + 1]
    return Band(ranked.score[at], ranked.position[at], ranked.cost[at])


def apply_cut(state: SelectionState, ranked: Ranked, cut: Cut) -> float:
    """Take the cut's pages of this shard; return their cost (the driver's ``remaining``)."""
    if cut.everything:
        count = ranked.index.shape[0]
    elif cut.last.score.size:
        count = int(_upto(ranked, cut.last.score, cut.last.position)[0])
    else:
        count = 0
    at = np.arange(count)
    if cut.extra.size:
        at = np.r_[at, np.flatnonzero(np.isin(ranked.position, cut.extra))]
    if at.size == 0:
        return 0.0
    chosen = ranked.index[at]
    state.taken[chosen] = True
    state.reason[chosen] = cut.code
    state.score[chosen] = ranked.score[at]
    np.add.at(state.used, ranked.host[at], 1.0)
    return float(ranked.cost[at].sum())


def finish_shard(shard: ShardSelection, settings: SelectionSettings) -> dict[str, NDArray[Any]]:
    """After the discovery fix, the shard's chosen pages (global position order)."""
    c = shard.candidates
    known, _, _, p_changed, gain = _page_terms(c, settings.cycle_days)
    state = shard.state
    if shard.change_ratio is not None and c.size:
        # host by host, like every signalled host's reorder in select_batch
        p_changed, gain = apply_change_signals(
            c,
            shard.change_ratio,
            state.taken,
            state.reason,
            state.score,
            p_changed,
            gain,
            cycle_days=settings.cycle_days,
            spend_leftover=settings.slices.spend_leftover,
        )
    state.reason[state.taken & ~known] = DISCOVERY  # first visits keep their reason
    index = np.flatnonzero(state.taken)
    return {
        "position": index + shard.offset,
        "reason": state.reason[index],
        "score": state.score[index],
        "expected_gain": gain[index],
        "expected_change": p_changed[index],
        "cost": c.cost[index],
    }


class SelectionShards(Protocol):
    """The driver's view of the shards during selection: each call asks every shard once
    and returns one answer per shard, in shard order (in memory: :class:`LocalShards`;
    on Dask workers over Parquet: ``tasks.cycle.sharded_planning.DaskShards``)."""

    def knots(self, code: int, allowed: float) -> list[Band]: ...

    def cost_upto(self, code: int, keys: Band) -> list[FloatArray]: ...

    def band(self, code: int, after: Band, upto: Band) -> list[Band]: ...

    def cheap_after(self, code: int, last: Band, left: float) -> list[Band]: ...

    def apply(self, cut: Cut) -> list[float]: ...


def _one(band: Band, i: int) -> Band:
    return Band(band.score[i : i + 1], band.position[i : i + 1], band.cost[i : i + 1])


def _none() -> Band:
    return Band(np.zeros(0), np.zeros(0, np.int64), np.zeros(0))


def decide_take(shards: SelectionShards, code: int, allowed: float) -> Cut:
    """Where one take stops, found from the shards (the budget cut of ``_fill``)."""
    empty = Cut(code, _none(), False, np.zeros(0, np.int64))
    if allowed <= 0:
        return empty
    limit = allowed * (1 + 1e-12)
    knots = Band.merge(shards.knots(code, allowed))
    if knots.score.size == 0:
        return empty
    cost = np.sum(np.vstack(shards.cost_upto(code, knots)), axis=0)  # shard sums add up
    whole = int(np.searchsorted(cost, limit, side="right"))  # knots whose prefix fits
    after = _one(knots, whole - 1) if whole else _none()
    upto = _one(knots, whole) if whole < knots.score.size else _none()
    band = Band.merge(shards.band(code, after, upto))
    spent = (float(cost[whole - 1]) if whole else 0.0) + np.cumsum(band.cost)
    fits = int(np.searchsorted(spent, limit, side="right"))
    if fits == band.score.size and upto.score.size == 0:
        return Cut(code, _none(), True, np.zeros(0, np.int64))  # the whole pool fits
    last = _one(band, fits - 1) if fits else after
    left = allowed - (
        float(spent[fits - 1]) if fits else (float(cost[whole - 1]) if whole else 0.0)
    )
    extra = np.zeros(0, np.int64)
    if left > 0:
        cheap = Band.merge(shards.cheap_after(code, last, left))
        extra = cheap.position[np.cumsum(cheap.cost) <= left * (1 + 1e-12)]
    return Cut(code, last, False, extra)


def run_takes(shards: SelectionShards, settings: SelectionSettings) -> float:
    """Every take of ``select_batch``, in its order, on the shards; returns the budget left.

    Only the budget crosses shards (host capacities are the shards' own), so the pages
    taken are ``select_batch``'s, with one caveat of rounding: the driver adds a take's
    spend up shard by shard where ``select_batch`` adds it page by page, so a page whose
    cumulated cost lands within a few ulps of the take's limit could go the other way
    (never seen; the budget is respected either way).
    """
    budget, slices = settings.budget, settings.slices
    remaining = float(budget)
    shares = {
        VERIFICATION: slices.verification * budget,
        DISCOVERY: slices.discovery * budget,
        REESTIMATION: slices.reestimation * budget,
    }
    for code in TAKES:
        if code == AHEAD and not slices.spend_leftover:
            continue
        allowed = min(remaining, shares.get(code, remaining))
        cut = decide_take(shards, code, allowed)
        remaining -= math.fsum(shards.apply(cut))
    return remaining


def assemble_plan(parts: Sequence[dict[str, NDArray[Any]]], budget: float) -> CyclePlan:
    """The shards' chosen pages (shard order) as ``select_batch`` orders its plan: by
    reason, then score, ties by global position."""
    if not parts:
        raise AllocationInputError("no shards to select from")
    column = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    order = np.lexsort((-column["score"], column["reason"]))
    return CyclePlan(
        index=column["position"][order],
        reason=column["reason"][order],
        score=column["score"][order],
        expected_gain=column["expected_gain"][order],
        expected_change=column["expected_change"][order],
        cost=column["cost"][order],
        budget=float(budget),
    )


def select_sharded(shards: LocalShards, settings: SelectionSettings) -> CyclePlan:
    """``select_batch`` on the shards' candidates laid end to end, shard by shard."""
    run_takes(shards, settings)
    return assemble_plan(shards.finish(), settings.budget)


class LocalShards:
    """Shards held in memory (tests, and one worker's share): the protocol's reference."""

    def __init__(self, shards: Sequence[ShardSelection], settings: SelectionSettings) -> None:
        self.shards = list(shards)
        self.settings = settings
        self._ranked: dict[int, list[Ranked]] = {}

    def _rank(self, code: int) -> list[Ranked]:
        if code not in self._ranked:
            self._ranked = {code: [rank_shard(s, code, self.settings) for s in self.shards]}
        return self._ranked[code]

    def knots(self, code: int, allowed: float) -> list[Band]:
        return [shard_knots(r, allowed) for r in self._rank(code)]

    def cost_upto(self, code: int, keys: Band) -> list[FloatArray]:
        return [shard_cost_upto(r, keys) for r in self._rank(code)]

    def band(self, code: int, after: Band, upto: Band) -> list[Band]:
        return [shard_band(r, after, upto) for r in self._rank(code)]

    def cheap_after(self, code: int, last: Band, left: float) -> list[Band]:
        return [shard_cheap_after(r, last, left) for r in self._rank(code)]

    def apply(self, cut: Cut) -> list[float]:
        ranked = self._rank(cut.code)
        spent = [apply_cut(s.state, r, cut) for s, r in zip(self.shards, ranked, strict=True)]
        self._ranked = {}
        return spent

    def finish(self) -> list[dict[str, NDArray[Any]]]:
        return [finish_shard(s, self.settings) for s in self.shards]
