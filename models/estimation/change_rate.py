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
* :func:`estimate_rates` / :func:`estimate_from_stats` / :func:`estimate_from_moments` -
  maximum likelihood for irregular intervals
  (``sum_changed t / (exp(rate t) - 1) = sum_unchanged t``), with empirical-Bayes
  smoothing toward the page's group: Gamma priors with one shape shared by all groups and
  a mean per group, fitted by marginal likelihood (``models/rate_prior.py``), and the
  posterior mode in log-rate. Every page gets a finite estimate and an uncertainty; pages
  with no history get their group's prior. Where a prior cannot be fitted (the fit fails,
  or its estimates are not finite or leave the clamp) a weaker one stands in
  (``FALLBACKS``: mixture -> empirical -> the fixed weak prior); the result names the
  prior used and why (``RateEstimates.prior_used`` / ``prior_fallback``), and it is logged.

The per-page data the likelihood needs is held in :class:`IntervalStats`. The changed
intervals enter the likelihood only through ``sum_changed t / (exp(rate t) - 1)``; they
are kept either exactly (one node per interval, from flat arrays) or as a two-node Gauss
quadrature built from their first three moments (what the history store computes in
SQL). The quadrature is exact when a page's changed intervals take at most two distinct
lengths (regular revisits, or revisits every k or k+1 cycles) and a close approximation
otherwise (see ``tests/models/test_change_rate.py`` for the measured error).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.prior_names import PRIOR_NAMES, PriorName
from models.rate_data import (
    WEAK_PRIOR_RATE,
    WEAK_PRIOR_SHAPE,
    EstimationInputError,
    GammaPrior,
    IntervalStats,
    PageMoments,
    RateEstimates,
    _as_float,
    _check_counts,
    _check_positive,
    group_codes,
    select_pages,
    weak_prior,
)
from models.rate_prior import fit_group_priors
from models.rate_solver import CHUNK_PAGES, solve_posterior_mode

__all__ = [
    "FALLBACKS",
    "MAX_RATE",
    "MIN_RATE",
    "PRIOR_NAMES",
    "EstimationInputError",
    "GammaPrior",
    "IntervalStats",
    "PageMoments",
    "PriorChoice",
    "PriorName",
    "RateEstimates",
    "estimate_from_moments",
    "estimate_from_stats",
    "estimate_rates",
    "fit_group_priors",
    "improved_rate",
    "naive_rate",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_log = logging.getLogger(__name__)

#: Default clamp on estimated rates, changes/day (Kolobov et al., NeurIPS 2019).
MIN_RATE = 0.0005
MAX_RATE = 7.0
#: The clamp for pages with a trusted Last-Modified age: daily "changed or not" cannot tell
#: 7 changes a day from 30, but the time since the last change can.
MAX_AGED_RATE = 50.0
#: z for the reported two-sided 90% interval.
_Z90 = 1.6448536269514722


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


PriorChoice = PriorName | GammaPrior


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
    """Estimate rates from node-form per-page statistics (``groups`` per page)."""
    return _estimate_with_fallback(stats, groups, prior, (min_rate, max_rate))


def estimate_from_moments(
    moments: PageMoments,
    *,
    groups: ArrayLike | None = None,
    prior: PriorChoice = "empirical",
    min_rate: float = MIN_RATE,
    max_rate: float = MAX_RATE,
) -> RateEstimates:
    """Estimate rates from per-page moment sums (what the history store keeps).

    Same estimates as ``estimate_from_stats(moments.to_stats())``, built chunk by chunk:
    memory stays bounded and the work runs on every core. ``prior="mixture"`` is the
    robust group prior of ``models/mixture_prior.py`` (what the planner uses).
    """
    return _estimate_with_fallback(moments, groups, prior, (min_rate, max_rate))


#: Per prior asked for, the priors tried in turn: where one cannot be fitted (its fit
#: raises, or gives estimates that are not finite or leave the clamp), the next, weaker one.
#: The fixed weak prior always can be: its shape and rate are positive constants.
FALLBACKS: dict[str, tuple[str, ...]] = {
    "mixture": ("mixture", "empirical", "weak"),
    "empirical": ("empirical", "weak"),
    "none": ("none", "weak"),
}
assert tuple(FALLBACKS) == PRIOR_NAMES


def _estimate_with_fallback(
    pages: IntervalStats | PageMoments,
    groups: ArrayLike | None,
    prior: PriorChoice,
    clamp: tuple[float, float],
) -> RateEstimates:
    """Estimates under ``prior``, or the first weaker prior of ``FALLBACKS`` that fits.

    Malformed input (groups of the wrong shape, bad clamps, an unknown or non-positive
    prior) raises ``EstimationInputError`` before any fit; a fit that fails is logged once
    and named in the result (``prior_used``, ``prior_fallback``).
    """
    min_rate, max_rate = clamp
    if not 0 < min_rate < max_rate:
        raise EstimationInputError("need 0 < min_rate < max_rate")
    if isinstance(prior, GammaPrior):
        return _estimate(pages, _checked_gamma(prior, pages.size), clamp)
    if not isinstance(prior, str) or prior not in FALLBACKS:
        raise EstimationInputError(
            f"unknown prior {prior!r}: use 'mixture', 'empirical', 'none' or a GammaPrior"
        )
    if prior == "mixture":
        if not isinstance(pages, PageMoments):
            raise EstimationInputError(
                "the mixture prior needs per-page moment sums: use estimate_from_moments"
            )
        if clamp != (MIN_RATE, MAX_RATE):
            raise EstimationInputError("the mixture prior clamps to MIN_RATE..MAX_RATE")
    codes = group_codes(groups, pages.size)
    failures: list[str] = []
    for choice in FALLBACKS[prior]:
        try:
            est = _estimate_under(choice, pages, codes, clamp)
        except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:
            failures.append(f"{choice} prior could not be fitted ({exc})")
            continue
        problem = _implausible(est, rate_cap(pages.ages()[0], max_rate), min_rate)
        if problem:
            failures.append(f"{choice} prior could not be fitted ({problem})")
            continue
        if failures:
            _log.warning("estimated under the %s prior: %s", choice, "; ".join(failures))
        return replace(est, prior_used=choice, prior_fallback="; ".join(failures))
    # the weak prior's estimates are always plausible: reaching here is a defect
    raise AssertionError("; ".join(failures))


def _estimate_under(
    choice: str,
    pages: IntervalStats | PageMoments,
    codes: IntArray,
    clamp: tuple[float, float],
) -> RateEstimates:
    n_groups = int(codes.max()) + 1 if codes.shape[0] else 0
    if choice == "mixture":
        from models.mixture_prior import estimate_with_mixture_prior  # it builds on this module

        assert isinstance(pages, PageMoments)
        return estimate_with_mixture_prior(pages, codes)[0]
    if choice == "empirical":
        return _estimate(pages, _checked_gamma(fit_group_priors(pages, codes), pages.size), clamp)
    if choice == "none":
        return _estimate(pages, None, clamp)
    return _estimate(pages, weak_prior(codes, n_groups), clamp)


def _checked_gamma(prior: GammaPrior, size: int) -> GammaPrior:
    shape, rate_param = prior.per_page(size)
    if not ((shape > 0).all() and (rate_param > 0).all()):
        raise EstimationInputError("a GammaPrior needs positive shape and rate")
    if not (np.isfinite(shape).all() and np.isfinite(rate_param).all()):
        raise EstimationInputError("a GammaPrior needs finite shape and rate")
    return prior


def _implausible(est: RateEstimates, cap: FloatArray, min_rate: float = MIN_RATE) -> str:
    """What is wrong with ``est`` as a result ("" if nothing): every rate finite and within
    ``min_rate``..``cap`` (per page), log standard errors finite and non-negative, the 90%
    interval finite with ``0 <= low <= high``."""
    checks = (
        (np.isfinite(est.rate) & (est.rate >= min_rate) & (est.rate <= cap), "rates"),
        (np.isfinite(est.log_std) & (est.log_std >= 0), "standard errors"),
        (
            np.isfinite(est.rate_low)
            & np.isfinite(est.rate_high)
            & (est.rate_low >= 0)
            & (est.rate_low <= est.rate_high),
            "intervals",
        ),
    )
    bad = [
        f"{int((~ok).sum())} {what} not finite or out of range"
        for ok, what in checks
        if not ok.all()
    ]
    return ", ".join(bad)


def _estimate(
    pages: IntervalStats | PageMoments,
    gamma: GammaPrior | None,
    clamp: tuple[float, float],
) -> RateEstimates:
    """Solve and summarize pages in chunks of ``CHUNK_PAGES``, on a thread per core.

    ``gamma`` is the pages' prior; None is plain (smoothed) maximum likelihood, where a
    page with no observation at all gets the weak prior's (``models.rate_data.weak_prior``).
    """
    size = pages.size
    min_rate, max_rate = clamp
    out = {name: np.empty(size) for name in ("rate", "log_std", "low", "high", "prior")}

    def run(lo: int) -> None:
        hi = min(lo + CHUNK_PAGES, size)
        stats = pages.page_range(lo, hi)
        if gamma is None:
            rate, curvature = _smoothed_mle(stats)
            prior_rate = np.full(hi - lo, np.nan)
            # Nothing observed: the weak prior, whose log-rate posterior has curvature
            # equal to its shape (the quiet branch below gives its quantiles).
            blank = (stats.n_intervals == 0) & (stats.ages()[1] == 0)
            shape = np.where(blank, WEAK_PRIOR_SHAPE, 0.0)
            rate_param = np.where(blank, WEAK_PRIOR_RATE, 0.0)
            rate[blank] = prior_rate[blank] = WEAK_PRIOR_SHAPE / WEAK_PRIOR_RATE
            curvature[blank] = WEAK_PRIOR_SHAPE
            quiet = np.flatnonzero(blank)
        else:
            chunk_prior = gamma.page_range(lo, hi, size)
            shape, rate_param = chunk_prior.per_page(hi - lo)
            rate, curvature = _posterior_mode(stats, shape, rate_param)
            prior_rate = shape / rate_param
            quiet = np.flatnonzero(stats.n_changed == 0)
        cap = rate_cap(stats.ages()[0], max_rate)
        rate = np.minimum(np.maximum(rate, min_rate), cap)
        log_std = 1.0 / np.sqrt(curvature)
        with np.errstate(over="ignore"):  # an infinite spread: the end is then clipped
            spread = np.exp(_Z90 * log_std)
        low, high = rate / spread, rate * spread
        # Without an observed change the likelihood exp(-rate U) is conjugate: the
        # posterior is exactly Gamma(a, b + U), whose quantiles replace the Laplace
        # interval (which cannot reach toward zero, where such a posterior has its mass).
        aged_count, aged_days = stats.ages()
        quiet_prior = GammaPrior(shape[quiet] + aged_count[quiet], rate_param[quiet])
        days = stats.unchanged_days[quiet] + aged_days[quiet]
        low[quiet] = quiet_prior.quantile(0.05, days)
        high[quiet] = quiet_prior.quantile(0.95, days)
        out["rate"][lo:hi] = rate
        out["log_std"][lo:hi] = log_std
        out["low"][lo:hi] = np.minimum(low, cap)
        # no rate above the cap is reported, so neither is an interval's end (an
        # uninformative likelihood would put it at infinity)
        out["high"][lo:hi] = np.clip(high, min_rate, cap)
        out["prior"][lo:hi] = prior_rate

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(run, range(0, size, CHUNK_PAGES)))
    return RateEstimates(
        page_ids=pages.page_ids,
        rate=out["rate"],
        log_std=out["log_std"],
        rate_low=out["low"],
        rate_high=out["high"],
        n_intervals=pages.n_intervals,
        n_changed=pages.all_changed if isinstance(pages, PageMoments) else pages.n_changed,
        observed_days=(
            pages.observed_days
            if isinstance(pages, PageMoments)
            else pages.unchanged_days + pages.changed_days
        ),
        prior_rate=out["prior"],
    )


def rate_cap(aged_count: FloatArray, max_rate: float = MAX_RATE) -> FloatArray:
    """Per page the highest rate reported: ``MAX_AGED_RATE`` where a trusted age was seen."""
    return np.where(aged_count > 0, max(max_rate, MAX_AGED_RATE), max_rate)


def _smoothed_mle(stats: IntervalStats) -> tuple[FloatArray, FloatArray]:
    """Plain MLE; where it is 0 or infinite, add one changed and one unchanged half-interval.

    The half-interval is half the page's mean interval (Kolobov et al. smooth the same
    way). Pages with no intervals at all get NaN rate and a tiny curvature.
    """
    p = stats.size
    zeros = np.zeros(p)
    rate, curv = _posterior_mode(stats, zeros, zeros)
    aged_count, aged_days = stats.ages()
    seen = (stats.n_intervals > 0) | (aged_days > 0)
    half = 0.5 * (stats.unchanged_days + stats.changed_days) / np.maximum(stats.n_intervals, 1)
    half = np.where(stats.n_intervals > 0, half, 0.5 * aged_days)
    # Never changed: one imaginary changed half-interval h against U + h unchanged days,
    # h / (exp(r h) - 1) = U + h, solved in closed form. (A trusted age is a change: a page
    # with one has a finite MLE, K / (U + S) without censored changes.)
    quiet = np.flatnonzero(seen & (stats.n_changed == 0) & (aged_count == 0))
    h, total = half[quiet], stats.unchanged_days[quiet] + aged_days[quiet] + half[quiet]
    r_quiet = np.log1p(h / total) / h
    rate[quiet] = r_quiet
    em1 = np.expm1(r_quiet * h)
    curv[quiet] = r_quiet**2 * h * h * (em1 + 1.0) / em1**2
    # Changed at every visit: add the two half-intervals and solve those pages alone.
    busy = np.flatnonzero(
        seen & (stats.n_changed == stats.n_intervals) & (aged_days == 0) & (aged_count == 0)
    )
    if busy.shape[0]:
        sub = select_pages(stats, busy)
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


def _posterior_mode(
    stats: IntervalStats,
    shape: FloatArray,
    rate_param: FloatArray,
    *,
    start: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Posterior mode in log-rate and its curvature for every page (see rate_solver)."""
    # Trusted Last-Modified ages add ``K log r - r S``: Gamma-conjugate, so they enter as
    # K more pseudo-changes and S more pseudo-days.
    aged_count, aged_days = stats.ages()
    return solve_posterior_mode(
        stats.node_page,
        stats.node_days,
        stats.node_weight,
        stats.unchanged_days + rate_param + aged_days,
        shape + aged_count,
        start=start,
    )
