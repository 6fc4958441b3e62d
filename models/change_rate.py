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
        *,
        check_unique: bool = True,
    ) -> IntervalStats:
        """Statistics from per-page sums of the changed intervals' first three powers.

        The changed-interval term of the likelihood is then evaluated by two-node Gauss
        quadrature matching those moments. Pages with no intervals (all zeros) are kept:
        they get their group's prior. ``check_unique=False`` skips the (hashing) check
        that page ids are unique, for callers whose SQL guarantees it.
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
        if check_unique and np.unique(ids).shape[0] != ids.shape[0]:
            raise EstimationInputError("page_ids must be unique in per-page statistics")
        _check_counts(n_int.astype(np.float64), n_chg.astype(np.float64))
        if (unchanged < 0).any() or (s1 < 0).any():
            raise EstimationInputError("interval sums must be non-negative")
        if ((n_int - n_chg > 0) & ~(unchanged > 0)).any() or ((n_chg > 0) & ~(s1 > 0)).any():
            raise EstimationInputError("pages with intervals must have positive interval sums")
        t1, w1, t2, w2 = _two_point_quadrature(n_chg.astype(np.float64), s1, s2, s3)
        has = n_chg > 0
        # Nodes interleaved page by page (sorted by page, as the solver wants them).
        keep = np.stack([has, has & (w2 > 0)], axis=1).ravel()
        return cls(
            page_ids=ids,
            n_intervals=n_int,
            n_changed=n_chg,
            unchanged_days=unchanged,
            changed_days=s1,
            node_page=np.repeat(np.arange(ids.shape[0], dtype=np.int64), 2)[keep],
            node_days=np.stack([t1, t2], axis=1).ravel()[keep],
            node_weight=np.stack([w1, w2], axis=1).ravel()[keep],
        )


@dataclass(frozen=True)
class GammaPrior:
    """Gamma(shape, rate) priors on change rates: one pair per group, ``index`` maps pages.

    A prior's mean is ``shape / rate`` changes/day; ``rate`` acts as pseudo-days of
    observation without change and ``shape`` as pseudo-changes. ``index`` (one entry per
    page) names each page's group; with ``index=None`` the pairs are per page.
    """

    shape: FloatArray
    rate: FloatArray
    index: IntArray | None = None

    def per_page(self, size: int) -> tuple[FloatArray, FloatArray]:
        shape = np.asarray(self.shape, dtype=np.float64)
        rate = np.asarray(self.rate, dtype=np.float64)
        if self.index is None:
            return np.broadcast_to(shape, (size,)).copy(), np.broadcast_to(rate, (size,)).copy()
        return shape[self.index], rate[self.index]

    def quantile(self, q: float, extra_days: FloatArray) -> FloatArray:
        """Per-page q-quantile of Gamma(shape, rate + extra_days) (special function per group)."""
        shape = np.asarray(self.shape, dtype=np.float64)
        base = special.gammaincinv(shape, q)
        rate = np.asarray(self.rate, dtype=np.float64)
        if self.index is None:
            out: FloatArray = np.broadcast_to(base, extra_days.shape) / (rate + extra_days)
            return out
        return base[self.index] / (rate[self.index] + extra_days)


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
        gamma = prior
        shape, rate_param = gamma.per_page(p)
        if not ((shape > 0).all() and (rate_param > 0).all()):
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
        shape, rate_param = gamma.per_page(p)
        rate, curvature = _posterior_mode(stats, shape, rate_param)
        prior_rate = shape / rate_param
    rate = np.clip(rate, min_rate, max_rate)
    log_std = 1.0 / np.sqrt(curvature)
    low = rate * np.exp(-_Z90 * log_std)
    high = rate * np.exp(_Z90 * log_std)
    if gamma is not None:
        # Without an observed change the likelihood exp(-rate U) is conjugate: the
        # posterior is exactly Gamma(a, b + U), whose quantiles replace the Laplace interval
        # (which cannot reach toward zero, where such a posterior has its mass).
        quiet = stats.n_changed == 0
        low = np.where(quiet, gamma.quantile(0.05, stats.unchanged_days), low)
        high = np.where(quiet, gamma.quantile(0.95, stats.unchanged_days), high)
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
    sample_per_group: int = 256,
    seed: int = 0,
) -> GammaPrior:
    """Empirical-Bayes Gamma prior per group, fitted by expectation-maximization.

    The prior of each group is the Gamma(a, b) that maximizes the marginal likelihood of
    its pages' observations, found by EM: the E-step takes each page's posterior under the
    current prior (exact for pages that never changed, whose posterior is
    Gamma(a, b + unchanged days); a Laplace approximation in log-rate otherwise), and the
    M-step is the Gamma maximum-likelihood update on the posterior means of rate and
    log-rate (Minka's fixed point). It starts from a cheap log-moment fit of the pages'
    smoothed MLEs. Fitting plain MLEs instead would be badly biased: pages that never
    changed in a short history all look alike, so their spread, and how slow the slowest
    pages are, would be lost.

    At most ``sample_per_group`` pages per group (a reproducible random sample) enter the
    fit; every page is then estimated under its group's prior. Groups with fewer than
    ``MIN_GROUP_PAGES`` observed pages use a prior fitted to the sample of all groups;
    with no observed page at all, a vague prior centred on one change a month.
    """
    p = stats.size
    codes = _group_codes(groups, p)
    n_groups = int(codes.max()) + 1 if p else 0
    seen = stats.n_intervals > 0
    count = _weighted_count(codes, seen.astype(np.float64), n_groups)
    keep = np.minimum(1.0, sample_per_group / np.maximum(count, 1.0))
    rng = np.random.default_rng(seed)
    sample = np.flatnonzero(seen & (rng.random(p) < keep[codes]))
    if sample.shape[0] == 0:
        shape, rate = np.full(n_groups, 0.5), np.full(n_groups, 15.0)
        return GammaPrior(shape=shape, rate=rate, index=codes)
    sub = _select(stats, sample)
    sub_codes = codes[sample]
    clamp = (min_rate, max_rate)
    a_all, b_all = _fit_gamma_em(sub, np.zeros(sample.shape[0], dtype=np.int64), 1, clamp)
    a_grp, b_grp = _fit_gamma_em(sub, sub_codes, n_groups, clamp)
    small = count < MIN_GROUP_PAGES
    shape = np.where(small, a_all[0], a_grp)
    rate = np.where(small, b_all[0], b_grp)
    return GammaPrior(shape=shape, rate=rate, index=codes)


def _group_codes(groups: ArrayLike | None, size: int) -> IntArray:
    """Dense integer codes for per-page group labels (used as-is if already small ints)."""
    if groups is None:
        return np.zeros(size, dtype=np.int64)
    g = np.asarray(groups)
    if g.shape != (size,):
        raise EstimationInputError(f"groups must have one entry per page ({size}), got {g.shape}")
    if g.dtype.kind in "iu" and size and g.min() >= 0 and g.max() < 2 * size:
        return g.astype(np.int64)
    _, inverse = np.unique(g, return_inverse=True)
    return inverse.astype(np.int64)


def _fit_gamma_em(
    stats: IntervalStats,
    codes: IntArray,
    n_groups: int,
    clamp: tuple[float, float],
    iterations: int = 100,
    tolerance: float = 1e-4,
) -> tuple[FloatArray, FloatArray]:
    """Per-group Gamma (shape, rate) by EM over the given pages (all observed)."""
    count = _weighted_count(codes, np.ones(codes.shape[0]), n_groups)
    shape, rate = _log_moment_fit(stats, codes, n_groups, clamp)
    quiet = stats.n_changed == 0
    unchanged = stats.unchanged_days
    guess: FloatArray | None = None
    for _ in range(iterations):
        a, b = shape[codes], rate[codes]
        mode, curvature = _posterior_mode(stats, a, b, start=guess)
        guess = mode
        e_log = np.where(quiet, special.digamma(shape)[codes] - np.log(b + unchanged), np.log(mode))
        e_rate = np.where(
            quiet,
            a / (b + unchanged),
            np.minimum(mode * np.exp(0.5 / curvature), np.e * clamp[1]),
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_rate = _weighted_count(codes, e_rate, n_groups) / count
            mean_log = _weighted_count(codes, e_log, n_groups) / count
        gap = np.maximum(np.log(mean_rate) - mean_log, 1e-8)
        new_shape = np.clip(_inverse_log_minus_digamma(gap), 1e-3, 1e4)
        new_rate = new_shape / mean_rate
        valid = count > 0
        new_shape = np.where(valid, new_shape, shape)
        new_rate = np.where(valid, new_rate, rate)
        step = np.maximum(np.abs(np.log(new_shape / shape)), np.abs(np.log(new_rate / rate)))
        shape, rate = new_shape, new_rate
        if not (step > tolerance).any():
            break
    return shape, rate


def _log_moment_fit(
    stats: IntervalStats, codes: IntArray, n_groups: int, clamp: tuple[float, float]
) -> tuple[FloatArray, FloatArray]:
    """Gamma matched to the mean and variance of the pages' smoothed log-MLEs (EM's start)."""
    rate, _ = _smoothed_mle(stats)
    log_rate = np.log(np.clip(np.nan_to_num(rate, nan=1.0), *clamp))
    count = _weighted_count(codes, np.ones(codes.shape[0]), n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = _weighted_count(codes, log_rate, n_groups) / count
        var = _weighted_count(codes, log_rate**2, n_groups) / count - mean**2
    mean = np.where(count > 0, mean, np.log(1 / 30))
    var = np.where(count > 1, np.maximum(var, _MIN_LOG_VARIANCE), 4.0)
    shape = _inverse_trigamma(var)
    return shape, np.exp(special.digamma(shape) - mean)


# --------------------------------------------------------------------------- solver


def _smoothed_mle(stats: IntervalStats) -> tuple[FloatArray, FloatArray]:
    """Plain MLE; where it is 0 or infinite, add one changed and one unchanged half-interval.

    The half-interval is half the page's mean interval (Kolobov et al. smooth the same
    way). Pages with no intervals at all get NaN rate and a tiny curvature.
    """
    p = stats.size
    zeros = np.zeros(p)
    rate, curv = _posterior_mode(stats, zeros, zeros)
    seen = stats.n_intervals > 0
    half = 0.5 * (stats.unchanged_days + stats.changed_days) / np.maximum(stats.n_intervals, 1)
    # Never changed: one imaginary changed half-interval h against U + h unchanged days,
    # h / (exp(r h) - 1) = U + h, solved in closed form.
    quiet = np.flatnonzero(seen & (stats.n_changed == 0))
    h, total = half[quiet], stats.unchanged_days[quiet] + half[quiet]
    r_quiet = np.log1p(h / total) / h
    rate[quiet] = r_quiet
    em1 = np.expm1(r_quiet * h)
    curv[quiet] = r_quiet**2 * h * h * (em1 + 1.0) / em1**2
    # Changed at every visit: add the two half-intervals and solve those pages alone.
    busy = np.flatnonzero(seen & (stats.n_changed == stats.n_intervals))
    if busy.shape[0]:
        sub = _select(stats, busy)
        padded = IntervalStats(
            page_ids=sub.page_ids,
            n_intervals=sub.n_intervals,
            n_changed=sub.n_changed,
            unchanged_days=sub.unchanged_days + half[busy],
            changed_days=sub.changed_days,
            node_page=np.concatenate([sub.node_page, np.arange(busy.shape[0])]),
            node_days=np.concatenate([sub.node_days, half[busy]]),
            node_weight=np.concatenate([sub.node_weight, np.ones(busy.shape[0])]),
        )
        sub_zeros = np.zeros(busy.shape[0])
        rate[busy], curv[busy] = _posterior_mode(padded, sub_zeros, sub_zeros)
    rate = np.where(seen, rate, np.nan)
    curv = np.where(~seen | ~(curv > 0), 1e-12, curv)
    return rate, curv


def _select(stats: IntervalStats, pages: IntArray) -> IntervalStats:
    """The statistics of some pages (sorted indices), nodes renumbered."""
    keep = np.zeros(stats.size, dtype=bool)
    keep[pages] = True
    new_index = np.cumsum(keep) - 1
    node_keep = keep[stats.node_page]
    return IntervalStats(
        page_ids=stats.page_ids[pages],
        n_intervals=stats.n_intervals[pages],
        n_changed=stats.n_changed[pages],
        unchanged_days=stats.unchanged_days[pages],
        changed_days=stats.changed_days[pages],
        node_page=new_index[stats.node_page[node_keep]],
        node_days=stats.node_days[node_keep],
        node_weight=stats.node_weight[node_keep],
    )


def _posterior_mode(
    stats: IntervalStats,
    shape: FloatArray,
    rate_param: FloatArray,
    *,
    start: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Solve ``G(r) + a / r = U + b`` per page, G the changed-interval term; return r, J.

    ``G(r) = sum_nodes w t / (exp(r t) - 1)`` is decreasing, so the root is unique
    whenever ``U + b > 0`` and there is a change or a prior. Multiplying by r gives
    ``S(r) + a = (U + b) r`` with ``S = sum w phi(r t)``, ``phi(u) = u / (exp(u) - 1)``
    falling from 1 to 0; in logs, ``F = log(S + a) - log r - log(U + b)`` has slope
    ``D / (S + a) - 1`` in log r (``D = sum w u phi'(u) <= 0``), always <= -1, so Newton
    in log r converges in a handful of steps from any start, all pages at once.
    ``J = a + S - D`` is the curvature of the log posterior in log r.
    Pages without a root (no change and no prior, or nothing unchanged) get NaN.
    """
    p = stats.size
    target = stats.unchanged_days + rate_param
    node_mass = _weighted_count(stats.node_page, stats.node_weight, p)
    solvable = (target > 0) & ((node_mass > 0) | (shape > 0))
    exposure = target + stats.changed_days
    guess = (node_mass + shape) / np.where(exposure > 0, exposure, 1.0)
    if start is not None:
        guess = np.where(np.isfinite(start) & (start > 0), start, guess)
    log_r = np.log(np.clip(guess, 1e-12, 1e9))
    log_target = np.log(np.where(solvable, target, 1.0))
    node_page, node_days, node_weight = stats.node_page, stats.node_days, stats.node_weight
    if (np.diff(node_page) < 0).any():
        order = np.argsort(node_page, kind="stable")
        node_page, node_days, node_weight = node_page[order], node_days[order], node_weight[order]
    node_start = np.searchsorted(node_page, np.arange(p + 1))

    def sums(pages: IntArray, r: FloatArray) -> tuple[FloatArray, FloatArray]:
        """S and D for the given pages (their nodes gathered by CSR offsets)."""
        counts = node_start[pages + 1] - node_start[pages]
        total = int(counts.sum())
        size = pages.shape[0]
        if total == 0:
            return np.zeros(size), np.zeros(size)
        local = np.repeat(np.arange(size), counts)
        idx = np.repeat(node_start[pages] - np.cumsum(counts) + counts, counts) + np.arange(total)
        u = r[local] * node_days[idx]
        phi, u_dphi = _phi(u)
        w = node_weight[idx]
        return _weighted_count(local, w * phi, size), _weighted_count(local, w * u_dphi, size)

    active = np.flatnonzero(solvable)
    for _ in range(60):
        if active.shape[0] == 0:
            break
        r = np.exp(log_r[active])
        s_val, d_val = sums(active, r)
        total = s_val + shape[active]
        f = np.log(total) - log_r[active] - log_target[active]
        step = np.clip(-f / (d_val / total - 1.0), -10.0, 10.0)
        log_r[active] += step
        active = active[np.abs(step) > 1e-11]

    rate = np.where(solvable, np.exp(np.clip(log_r, -700.0, 700.0)), np.nan)
    s_all, d_all = sums(np.arange(p, dtype=np.int64), np.where(solvable, rate, 1.0))
    return rate, shape + s_all - d_all


def _phi(u: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``phi(u) = u / (exp(u) - 1)`` and ``u phi'(u)``, stable for tiny and huge u."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        em1 = np.expm1(u)
        phi = u / em1
        u_dphi = u * (em1 - u * (em1 + 1.0)) / (em1 * em1)
    tiny = u < 1e-8
    phi = np.where(tiny, 1.0, np.where(np.isfinite(phi), phi, 0.0))
    u_dphi = np.where(tiny, -0.5 * u, np.where(np.isfinite(u_dphi), u_dphi, 0.0))
    return phi, u_dphi


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


def _inverse_log_minus_digamma(gap: FloatArray) -> FloatArray:
    """Solve log(a) - digamma(a) = gap for a > 0 (Minka's start, then Newton)."""
    a = (3.0 - gap + np.sqrt((gap - 3.0) ** 2 + 24.0 * gap)) / (12.0 * gap)
    for _ in range(8):
        f = np.log(a) - special.digamma(a) - gap
        slope = 1.0 / a - special.polygamma(1, a)
        a = np.maximum(a - f / slope, a / 10.0)
    out: FloatArray = a
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
