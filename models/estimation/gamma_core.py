"""The Gamma-prior core of change-rate estimation: per-page posterior modes, all pages at once.

``estimate_with_gamma`` solves every page under a given Gamma prior (or none: smoothed
maximum likelihood) in chunks, on a thread per core, and summarizes each page's estimate,
log-rate standard error and 90% interval; the clamps (``MIN_RATE``, ``MAX_RATE``,
``rate_cap``) live here. Both the public estimators (:mod:`models.estimation.change_rate`)
and the mixture prior (:mod:`models.estimation.mixture_prior`, which builds each group's
Gamma) stand on it, so neither imports the other's module back.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.typing import NDArray

from models.estimation.rate_data import (
    WEAK_PRIOR_RATE,
    WEAK_PRIOR_SHAPE,
    EstimationInputError,
    GammaPrior,
    IntervalStats,
    PageMoments,
    RateEstimates,
    select_pages,
)
from models.estimation.rate_solver import CHUNK_PAGES, solve_posterior_mode

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


#: Default clamp on estimated rates, changes/day (Kolobov et al., NeurIPS 2019).
MIN_RATE = 0.0005


MAX_RATE = 7.0


#: The clamp for pages with a trusted Last-Modified age: daily "changed or not" cannot tell
#: 7 changes a day from 30, but the time since the last change can.
MAX_AGED_RATE = 50.0


#: z for the reported two-sided 90% interval.
_Z90 = 1.6448536269514722


def _checked_gamma(prior: GammaPrior, size: int) -> GammaPrior:
    shape, rate_param = prior.per_page(size)
    if not ((shape > 0).all() and (rate_param > 0).all()):
        raise EstimationInputError("a GammaPrior needs positive shape and rate")
    if not (np.isfinite(shape).all() and np.isfinite(rate_param).all()):
        raise EstimationInputError("a GammaPrior needs finite shape and rate")
    return prior


def _estimate(
    pages: IntervalStats | PageMoments,
    gamma: GammaPrior | None,
    clamp: tuple[float, float],
    *,
    exact_quiet: bool = True,
) -> RateEstimates:
    """Solve and summarize pages in chunks of ``CHUNK_PAGES``, on a thread per core.

    ``gamma`` is the pages' prior; None is plain (smoothed) maximum likelihood, where a
    page with no observation at all gets the weak prior's
    (``models.estimation.rate_data.weak_prior``). Without ``exact_quiet`` every page gets
    the Laplace interval (quiet pages' Gamma quantiles cost a ``gammaincinv`` per distinct
    shape, per chunk: seconds with one shape per group on millions of pages).
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
        if exact_quiet:
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


def estimate_with_gamma(
    pages: IntervalStats | PageMoments,
    prior: GammaPrior,
    clamp: tuple[float, float] = (MIN_RATE, MAX_RATE),
    *,
    exact_quiet: bool = True,
) -> RateEstimates:
    """Every page's estimate under ``prior`` (checked: positive, finite), within ``clamp``.

    ``exact_quiet=False`` skips the quiet pages' exact Gamma quantiles (their interval is
    then the Laplace one, as every other page's): for callers that use only ``rate`` and
    ``log_std``.
    """
    return _estimate(pages, _checked_gamma(prior, pages.size), clamp, exact_quiet=exact_quiet)
