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
  a mean per group, fitted by marginal likelihood (``models/estimation/rate_prior.py``), and the
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
otherwise (see ``tests/models/estimation/test_change_rate.py`` for the measured error).
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.estimation.gamma_core import (
    MAX_AGED_RATE,
    MAX_RATE,
    MIN_RATE,
    _checked_gamma,
    _estimate,
    rate_cap,
)
from models.estimation.mixture_prior import estimate_with_mixture_prior
from models.estimation.prior_names import PRIOR_NAMES, PriorName
from models.estimation.rate_data import (
    EstimationInputError,
    GammaPrior,
    IntervalStats,
    PageMoments,
    RateEstimates,
    _as_float,
    _check_counts,
    _check_positive,
    group_codes,
    weak_prior,
)
from models.estimation.rate_prior import fit_group_priors

__all__ = [
    "FALLBACKS",
    "MAX_AGED_RATE",
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
    robust group prior of ``models/estimation/mixture_prior.py`` (what the planner uses).
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
        assert isinstance(pages, PageMoments)
        return estimate_with_mixture_prior(pages, codes)[0]
    if choice == "empirical":
        return _estimate(pages, _checked_gamma(fit_group_priors(pages, codes), pages.size), clamp)
    if choice == "none":
        return _estimate(pages, None, clamp)
    return _estimate(pages, weak_prior(codes, n_groups), clamp)


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
