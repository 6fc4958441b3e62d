"""Change-rate estimation under a Poisson change model, vectorized over all pages.

A visit only tells whether a page changed *at least once* since the previous visit,
so the number of changes in an interval of length ``t`` is censored: the probability
of seeing "changed" is ``1 - exp(-rate * t)``. Estimators here correct for that.

Units: intervals in days, rates in changes per day.

Three estimators:

* :func:`naive_rate` - changes seen / time observed. Biased low: with regular
  intervals ``I`` its expectation is ``(1 - exp(-rate I)) / I``.
* :func:`improved_rate` - Cho & Garcia-Molina (ACM TOIT 2003) for regular intervals,
  ``-log((n - X + 0.5) / (n + 0.5)) / I``; finite for X = 0 and X = n.
* :func:`estimate_rates` / :func:`estimate_from_stats` - maximum likelihood for
  irregular intervals (``sum_changed t / (exp(rate t) - 1) = sum_unchanged t``), with
  empirical-Bayes smoothing toward the page's group: a Gamma prior per group, fitted
  to the group's pages, and the posterior mode in log-rate. Every page gets a finite
  estimate and an uncertainty; pages with no history get their group's prior.

The per-page data the likelihood needs is held in :class:`IntervalStats`. The changed
intervals enter the likelihood only through ``sum_changed t / (exp(rate t) - 1)``; they
are kept either exactly (one node per interval, from flat arrays) or as a two-node Gauss
quadrature built from their first three moments (what the history store computes in
SQL). The quadrature is exact when a page's changed intervals take at most two distinct
lengths (regular revisits, or revisits every k or k+1 cycles) and a close approximation
otherwise (see ``tests/models/test_change_rate.py`` for the measured error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Default clamp on estimated rates, changes/day (Kolobov et al., NeurIPS 2019).
MIN_RATE = 0.0005
MAX_RATE = 7.0
#: z for the reported two-sided 90% interval.
_Z90 = 1.6448536269514722
#: Floor on the between-page variance of log-rates in a group: keeps any prior weak.
_MIN_LOG_VARIANCE = 0.25
#: Groups with fewer pages than this borrow the global prior.
MIN_GROUP_PAGES = 5


class EstimationInputError(ValueError):
    """The arrays given to an estimator are malformed; the message says which and how."""


# --------------------------------------------------------------------------- closed forms


def naive_rate(n: ArrayLike, changes: ArrayLike, interval: ArrayLike) -> FloatArray:
    """Changes per unit time, X / (n I). Saturates at 1/I: it cannot see repeated changes."""
    n_, x_, i_ = _as_float(n, "n"), _as_float(changes, "changes"), _as_float(interval, "interval")
    _check_counts(n_, x_)
    _check_positive(i_, "interval")
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(n_ > 0, x_ / (n_ * i_), np.nan)
    return out


def improved_rate(n: ArrayLike, changes: ArrayLike, interval: ArrayLike = 1.0) -> FloatArray:
    """Cho & Garcia-Molina's improved estimator for n visits at a regular interval.

    ``-log((n - X + 0.5) / (n + 0.5)) / interval``; (10, 5) -> 0.646627 for I = 1.
    """
    n_, x_, i_ = _as_float(n, "n"), _as_float(changes, "changes"), _as_float(interval, "interval")
    _check_counts(n_, x_)
    _check_positive(i_, "interval")
    out: FloatArray = -np.log((n_ - x_ + 0.5) / (n_ + 0.5)) / i_
    return out


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class IntervalStats:
    """Per-page sufficient statistics of the observed intervals.

    ``page_ids`` are unique. ``n_intervals`` and ``n_changed`` count observed intervals
    and those that saw a change; ``unchanged_days`` sums the intervals without a change.
    The changed intervals are given as weighted nodes: ``node_page`` indexes into
    ``page_ids``, ``node_days`` is the interval length and ``node_weight`` how many
    intervals the node stands for.
    """

    page_ids: IntArray
    n_intervals: IntArray
    n_changed: IntArray
    unchanged_days: FloatArray
    changed_days: FloatArray
    node_page: IntArray
    node_days: FloatArray
    node_weight: FloatArray

    @property
    def size(self) -> int:
        return int(self.page_ids.shape[0])

    @classmethod
    def from_intervals(
        cls, page_ids: ArrayLike, intervals: ArrayLike, changed: ArrayLike
    ) -> IntervalStats:
        """Exact statistics from flat arrays, one row per observed interval (any order)."""
        ids = _as_int(page_ids, "page_ids")
        days = _as_float(intervals, "intervals")
        flags = np.asarray(changed)
        if not (ids.shape == days.shape == flags.shape) or ids.ndim != 1:
            raise EstimationInputError(
                "page_ids, intervals and changed must be 1-D arrays of equal length; got "
                f"shapes {ids.shape}, {days.shape}, {flags.shape}"
            )
        if flags.dtype != np.bool_:
            if flags.dtype == object or not np.isin(flags, (0, 1)).all():
                raise EstimationInputError("changed must hold booleans (True/False), no nulls")
            flags = flags.astype(bool)
        _check_positive(days, "intervals")
        uniq, page = np.unique(ids, return_inverse=True)
        p = uniq.shape[0]
        n_int = np.bincount(page, minlength=p).astype(np.int64)
        n_chg = np.bincount(page, weights=flags, minlength=p).astype(np.int64)
        unchanged = _weighted_count(page, np.where(flags, 0.0, days), p)
        changed_days = _weighted_count(page, np.where(flags, days, 0.0), p)
        return cls(
            page_ids=uniq.astype(np.int64),
            n_intervals=n_int,
            n_changed=n_chg,
            unchanged_days=unchanged,
            changed_days=changed_days,
            node_page=page[flags].astype(np.int64),
            node_days=days[flags],
            node_weight=np.ones(int(flags.sum())),
        )

    @classmethod
    def from_moments(
        cls,
        page_ids: ArrayLike,
        n_intervals: ArrayLike,
        n_changed: ArrayLike,
        unchanged_days: ArrayLike,
        changed_sum: ArrayLike,
        changed_sum_sq: ArrayLike,
        changed_sum_cube: ArrayLike,
    ) -> IntervalStats:
        """Statistics from per-page sums of the changed intervals' first three powers.

        The changed-interval term of the likelihood is then evaluated by two-node Gauss
        quadrature matching those moments. Pages with no intervals (all zeros) are kept:
        they get their group's prior.
        """
        ids = _as_int(page_ids, "page_ids")
        n_int = _as_int(n_intervals, "n_intervals")
        n_chg = _as_int(n_changed, "n_changed")
        unchanged = _as_float(unchanged_days, "unchanged_days")
        s1 = _as_float(changed_sum, "changed_sum")
        s2 = _as_float(changed_sum_sq, "changed_sum_sq")
        s3 = _as_float(changed_sum_cube, "changed_sum_cube")
        shapes = {a.shape for a in (ids, n_int, n_chg, unchanged, s1, s2, s3)}
        if len(shapes) != 1 or ids.ndim != 1:
            raise EstimationInputError("per-page moment arrays must be 1-D and of equal length")
        if np.unique(ids).shape[0] != ids.shape[0]:
            raise EstimationInputError("page_ids must be unique in per-page statistics")
        _check_counts(n_int.astype(np.float64), n_chg.astype(np.float64))
        if (unchanged < 0).any() or (s1 < 0).any():
            raise EstimationInputError("interval sums must be non-negative")
        if ((n_int - n_chg > 0) & ~(unchanged > 0)).any() or ((n_chg > 0) & ~(s1 > 0)).any():
            raise EstimationInputError("pages with intervals must have positive interval sums")
        t1, w1, t2, w2 = _two_point_quadrature(n_chg.astype(np.float64), s1, s2, s3)
        has = n_chg > 0
        pages = np.flatnonzero(has)
        second = has & (w2 > 0)
        return cls(
            page_ids=ids,
            n_intervals=n_int,
            n_changed=n_chg,
            unchanged_days=unchanged,
            changed_days=s1,
            node_page=np.concatenate([pages, np.flatnonzero(second)]).astype(np.int64),
            node_days=np.concatenate([t1[has], t2[second]]),
            node_weight=np.concatenate([w1[has], w2[second]]),
        )


@dataclass(frozen=True)
class GammaPrior:
    """Gamma(shape, rate) prior on a page's change rate, one pair per page (broadcastable).

    Its mean is ``shape / rate`` changes/day; ``rate`` acts as pseudo-days of observation
    without change and ``shape`` as pseudo-changes.
    """

    shape: FloatArray
    rate: FloatArray

    @property
    def mean(self) -> FloatArray:
        out: FloatArray = self.shape / self.rate
        return out


@dataclass(frozen=True)
class RateEstimates:
    """Per-page change-rate estimates, aligned with ``page_ids``.

    ``rate`` is the estimate (changes/day); ``log_std`` the standard error of its
    logarithm (Laplace approximation), ``rate_low``/``rate_high`` a 90% interval (for
    pages that never changed under a prior, the exact Gamma posterior's quantiles);
    ``prior_rate`` the group prior's mean the page was smoothed toward (NaN without one).
    """

    page_ids: IntArray
    rate: FloatArray
    log_std: FloatArray
    rate_low: FloatArray
    rate_high: FloatArray
    n_intervals: IntArray
    n_changed: IntArray
    observed_days: FloatArray
    prior_rate: FloatArray


PriorChoice = Literal["empirical", "none"] | GammaPrior


# --------------------------------------------------------------------------- estimation


def estimate_rates(
    page_ids: ArrayLike,
    intervals: ArrayLike,
    changed: ArrayLike,
    *,
    groups: ArrayLike | None = None,
    prior: PriorChoice = "empirical",
    min_rate: float = MIN_RATE,
    max_rate: float = MAX_RATE,
) -> RateEstimates:
    """Estimate every page's change rate from flat arrays of observed intervals.

    ``page_ids``, ``intervals`` (days, > 0) and ``changed`` (bool) have one entry per
    observed interval, in any order. ``groups`` (optional, same length) names each row's
    smoothing group (host or page type); a page must have one group. ``prior`` is
    ``"empirical"`` (fit a Gamma prior per group, the default), ``"none"`` (plain
    maximum likelihood, with one imaginary changed and unchanged half-interval added
    only where the MLE is 0 or infinite), or a :class:`GammaPrior` aligned with the
    sorted unique page ids. Returns :class:`RateEstimates` sorted by page id.
    """
    stats = IntervalStats.from_intervals(page_ids, intervals, changed)
    page_groups = None
    if groups is not None:
        g = np.asarray(groups)
        if g.shape != np.asarray(page_ids).shape:
            raise EstimationInputError("groups must align with page_ids (one entry per row)")
        ids = np.asarray(page_ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        first = np.r_[True, np.diff(ids[order]) != 0]
        starts = order[first]
        page_of_row = np.cumsum(first) - 1
        if (g[order] != g[starts][page_of_row]).any():
            raise EstimationInputError("a page appears under more than one group")
        page_groups = g[starts]
    return estimate_from_stats(
        stats, groups=page_groups, prior=prior, min_rate=min_rate, max_rate=max_rate
    )


def estimate_from_stats(
    stats: IntervalStats,
    *,
    groups: ArrayLike | None = None,
    prior: PriorChoice = "empirical",
    min_rate: float = MIN_RATE,
    max_rate: float = MAX_RATE,
) -> RateEstimates:
    """Estimate rates from per-page statistics; ``groups`` aligns with ``stats.page_ids``."""
    if not 0 < min_rate < max_rate:
        raise EstimationInputError("need 0 < min_rate < max_rate")
    p = stats.size
    if isinstance(prior, GammaPrior):
        gamma = GammaPrior(
            np.broadcast_to(np.asarray(prior.shape, np.float64), (p,)).copy(),
            np.broadcast_to(np.asarray(prior.rate, np.float64), (p,)).copy(),
        )
        if not ((gamma.shape > 0).all() and (gamma.rate > 0).all()):
            raise EstimationInputError("a GammaPrior needs positive shape and rate")
    elif prior == "empirical":
        gamma = fit_group_priors(stats, groups, min_rate=min_rate, max_rate=max_rate)
    elif prior == "none":
        gamma = None
    else:
        raise EstimationInputError(
            f"unknown prior {prior!r}: use 'empirical', 'none' or a GammaPrior"
        )

    if gamma is None:
        rate, curvature = _smoothed_mle(stats)
        prior_rate = np.full(p, np.nan)
    else:
        rate, curvature = _posterior_mode(stats, gamma.shape, gamma.rate)
        prior_rate = gamma.mean
    rate = np.clip(rate, min_rate, max_rate)
    log_std = 1.0 / np.sqrt(curvature)
    low = rate * np.exp(-_Z90 * log_std)
    high = rate * np.exp(_Z90 * log_std)
    if gamma is not None:
        # Without an observed change the likelihood exp(-rate U) is conjugate: the
        # posterior is exactly Gamma(a, b + U), whose quantiles replace the Laplace interval
        # (which cannot reach toward zero, where such a posterior has its mass).
        quiet = stats.n_changed == 0
        scale = gamma.rate[quiet] + stats.unchanged_days[quiet]
        low[quiet] = special.gammaincinv(gamma.shape[quiet], 0.05) / scale
        high[quiet] = special.gammaincinv(gamma.shape[quiet], 0.95) / scale
    return RateEstimates(
        page_ids=stats.page_ids,
        rate=rate,
        log_std=log_std,
        rate_low=np.clip(low, 0.0, max_rate),
        rate_high=np.clip(high, min_rate, None),
        n_intervals=stats.n_intervals,
        n_changed=stats.n_changed,
        observed_days=stats.unchanged_days + stats.changed_days,
        prior_rate=prior_rate,
    )


def fit_group_priors(
    stats: IntervalStats,
    groups: ArrayLike | None,
    *,
    min_rate: float = MIN_RATE,
    max_rate: float = MAX_RATE,
) -> GammaPrior:
    """Empirical-Bayes Gamma prior per group, returned per page.

    Each page's smoothed MLE gives a log-rate; per group their mean and variance are
    matched to a Gamma distribution's log-moments
    (``E log rate = digamma(a) - log b``, ``Var log rate = trigamma(a)``). The variance
    is not reduced by the pages' sampling noise: that keeps the prior wide (it shrinks
    less than a fully fitted one would), the safe direction when a group mixes pages that
    never change with pages that change hourly; it is also floored. Groups with
    fewer than ``MIN_GROUP_PAGES`` observed pages use the prior fitted to all pages;
    with no observed page at all, a vague prior centred on one change a month.
    """
    p = stats.size
    if groups is None:
        codes = np.zeros(p, dtype=np.int64)
    else:
        g = np.asarray(groups)
        if g.shape != (p,):
            raise EstimationInputError(f"groups must have one entry per page ({p}), got {g.shape}")
        _, codes = np.unique(g, return_inverse=True)
        codes = codes.astype(np.int64)
    n_groups = int(codes.max()) + 1 if p else 0

    rate, _ = _smoothed_mle(stats)
    log_rate = np.log(np.clip(np.nan_to_num(rate, nan=1.0), min_rate, max_rate))
    seen = stats.n_intervals > 0
    w = seen.astype(np.float64)

    def moments(index: IntArray, size: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        count = _weighted_count(index, w, size)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = _weighted_count(index, w * log_rate, size) / count
            var = _weighted_count(index, w * log_rate**2, size) / count - mean**2
        return count, mean, np.maximum(var, _MIN_LOG_VARIANCE)

    g_count, g_mean, g_var = moments(codes, n_groups)
    a_count, a_mean, a_var = moments(np.zeros(p, dtype=np.int64), 1)
    if a_count[0] == 0:
        a_mean, a_var = np.array([np.log(1 / 30)]), np.array([4.0])
    small = g_count < MIN_GROUP_PAGES
    g_mean = np.where(small, a_mean[0], g_mean)
    g_var = np.where(small, a_var[0], g_var)
    shape = _inverse_trigamma(g_var)
    rate_param = np.exp(special.digamma(shape) - g_mean)
    return GammaPrior(shape=shape[codes], rate=rate_param[codes])


# --------------------------------------------------------------------------- solver


def _smoothed_mle(stats: IntervalStats) -> tuple[FloatArray, FloatArray]:
    """Plain MLE; where it is 0 or infinite, add one changed and one unchanged half-interval.

    Pages with no intervals at all get NaN rate and zero curvature replaced by 1e-12.
    """
    p = stats.size
    zeros = np.zeros(p)
    rate, curv = _posterior_mode(stats, zeros, zeros)
    boundary = (stats.n_intervals > 0) & (
        (stats.n_changed == 0) | (stats.n_changed == stats.n_intervals)
    )
    if boundary.any():
        half = 0.5 * (stats.unchanged_days + stats.changed_days) / np.maximum(stats.n_intervals, 1)
        extra = np.flatnonzero(boundary)
        padded = IntervalStats(
            page_ids=stats.page_ids,
            n_intervals=stats.n_intervals,
            n_changed=stats.n_changed,
            unchanged_days=stats.unchanged_days + np.where(boundary, half, 0.0),
            changed_days=stats.changed_days,
            node_page=np.concatenate([stats.node_page, extra]),
            node_days=np.concatenate([stats.node_days, half[extra]]),
            node_weight=np.concatenate([stats.node_weight, np.ones(extra.shape[0])]),
        )
        r2, c2 = _posterior_mode(padded, zeros, zeros)
        rate = np.where(boundary, r2, rate)
        curv = np.where(boundary, c2, curv)
    empty = stats.n_intervals == 0
    rate = np.where(empty, np.nan, rate)
    curv = np.where(empty | ~(curv > 0), 1e-12, curv)
    return rate, curv


def _posterior_mode(
    stats: IntervalStats, shape: FloatArray, rate_param: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Solve ``G(r) + a / r = U + b`` per page, G the changed-interval term; return r, J.

    ``G(r) = sum_nodes w t / (exp(r t) - 1)`` is decreasing, so the left side falls from
    +inf to 0 and the root is unique whenever ``U + b > 0`` and ``G + a`` is not all zero.
    Safeguarded Newton in log r, all pages at once; only unconverged pages iterate.
    ``J = a - r^2 G'(r)`` is the curvature of the log posterior in log r.
    Pages without a root (no data and no prior) get NaN.
    """
    p = stats.size
    target = stats.unchanged_days + rate_param
    node_mass = np.bincount(stats.node_page, weights=stats.node_weight, minlength=p)
    has_change = (node_mass > 0) | (shape > 0)
    solvable = (target > 0) & has_change
    # Start from the change count over total exposure (the naive rate), which brackets well.
    exposure = stats.unchanged_days + stats.changed_days + rate_param
    guess = (node_mass + shape) / np.where(exposure > 0, exposure, 1.0)
    log_r = np.log(np.clip(guess, 1e-9, 1e6))
    lo = np.full(p, np.log(1e-12))
    hi = np.full(p, np.log(1e9))
    active = np.flatnonzero(solvable)
    node_order = np.argsort(stats.node_page, kind="stable")
    node_page = stats.node_page[node_order]
    node_days = stats.node_days[node_order]
    node_weight = stats.node_weight[node_order]
    node_start = np.searchsorted(node_page, np.arange(p + 1))

    def term(pages: IntArray, r: FloatArray) -> tuple[FloatArray, FloatArray]:
        """G and dG/dr for the given pages (their nodes gathered by CSR offsets)."""
        counts = node_start[pages + 1] - node_start[pages]
        total = int(counts.sum())
        if total == 0:
            z = np.zeros(pages.shape[0])
            return z, z
        local = np.repeat(np.arange(pages.shape[0]), counts)
        idx = np.repeat(node_start[pages] - np.cumsum(counts) + counts, counts) + np.arange(total)
        t = node_days[idx]
        u = r[local] * t
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            em1 = np.expm1(u)
            g = node_weight[idx] * t / em1
            dg = -node_weight[idx] * t * t / (em1 * -np.expm1(-u))
        g = np.where(np.isfinite(g), g, 0.0)
        dg = np.where(np.isfinite(dg), dg, 0.0)
        size = pages.shape[0]
        return _weighted_count(local, g, size), _weighted_count(local, dg, size)

    for _ in range(100):
        if active.shape[0] == 0:
            break
        r = np.exp(log_r[active])
        g, dg = term(active, r)
        a = shape[active]
        h = g + a / r - target[active]
        slope = r * dg - a / r  # dh / dlog r, always < 0
        # h > 0 means the root is at a larger rate.
        lo[active] = np.where(h > 0, log_r[active], lo[active])
        hi[active] = np.where(h <= 0, log_r[active], hi[active])
        with np.errstate(divide="ignore", invalid="ignore"):
            step = -h / slope
        proposal = log_r[active] + np.clip(np.nan_to_num(step, nan=0.0), -5.0, 5.0)
        bad = ~((proposal > lo[active]) & (proposal < hi[active])) | (slope >= 0)
        proposal = np.where(bad, 0.5 * (lo[active] + hi[active]), proposal)
        done = np.abs(proposal - log_r[active]) < 1e-12
        log_r[active] = proposal
        active = active[~done]

    rate = np.where(solvable, np.exp(log_r), np.nan)
    all_pages = np.arange(p, dtype=np.int64)
    g, dg = term(all_pages, np.where(solvable, rate, 1.0))
    curvature = shape - np.where(solvable, rate, 1.0) ** 2 * dg
    return rate, curvature


# --------------------------------------------------------------------------- helpers


def _two_point_quadrature(
    count: FloatArray, s1: FloatArray, s2: FloatArray, s3: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Two nodes and weights matching count and the first three raw moment sums.

    For each page the distribution of its changed intervals is replaced by the unique
    two-point distribution with the same mean, variance and skewness (Gauss quadrature
    for that distribution): exact for any function when there are at most two distinct
    lengths. Zero variance gives one node carrying the whole weight.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(count > 0, s1 / count, 0.0)
        var = np.where(count > 0, s2 / count - mean**2, 0.0)
        third = np.where(count > 0, s3 / count - 3 * mean * s2 / count + 2 * mean**3, 0.0)
        flat = var <= 1e-12 * np.maximum(mean**2, 1e-300)
        sd = np.sqrt(np.where(flat, 1.0, var))
        skew = np.where(flat, 0.0, third / sd**3)
    root = np.sqrt(skew**2 + 4.0)
    z1, z2 = (skew - root) / 2.0, (skew + root) / 2.0  # z1 < 0 < z2, z1 * z2 = -1
    p1 = z2 / (z2 - z1)
    t1 = np.where(flat, mean, mean + sd * z1)
    t2 = np.where(flat, mean, mean + sd * z2)
    w1 = np.where(flat, count, count * p1)
    w2 = np.where(flat, 0.0, count * (1.0 - p1))
    # Rounding in the sums can push a node just below zero for very skewed tiny spreads.
    t1 = np.maximum(t1, np.where(count > 0, 1e-9 * mean, 0.0))
    return t1, w1, t2, w2


def _weighted_count(index: IntArray, weights: FloatArray, size: int) -> FloatArray:
    """Sum of ``weights`` per value of ``index`` (0..size-1), as float64."""
    out: FloatArray = np.bincount(index, weights=weights, minlength=size).astype(np.float64)
    return out


def _inverse_trigamma(y: FloatArray) -> FloatArray:
    """Solve trigamma(a) = y for a > 0 (Newton from a good start; y > 0)."""
    a = np.where(y > 1e-6, 0.5 + 1.0 / y, 1.0 / y)
    for _ in range(8):
        f = special.polygamma(1, a) - y
        a = np.maximum(a - f / special.polygamma(2, a), a / 10.0)
    out: FloatArray = a
    return out


def _as_float(values: ArrayLike, name: str) -> FloatArray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EstimationInputError(f"{name} must be numeric: {exc}") from None
    if np.isnan(arr).any():
        raise EstimationInputError(f"{name} contains NaN/missing values")
    return arr


def _as_int(values: ArrayLike, name: str) -> IntArray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise EstimationInputError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _check_counts(n: FloatArray, x: FloatArray) -> None:
    if (n < 0).any() or (x < 0).any() or (x > n).any():
        raise EstimationInputError("need 0 <= changes <= n for every page")


def _check_positive(values: FloatArray, name: str) -> None:
    bad = ~(values > 0) | ~np.isfinite(values)
    if bad.any():
        raise EstimationInputError(
            f"{name} must be positive and finite; {int(bad.sum())} value(s) are not "
            f"(first: {values[bad].ravel()[0]!r})"
        )
