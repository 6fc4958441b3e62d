"""What a revisit buys, under a Poisson change model: freshness, age, changes captured.

A page changes as a Poisson process of rate ``rate`` (changes per day) and is revisited at
fixed intervals, ``frequency`` times per day; ``r = rate / frequency`` is the expected
number of changes between visits. Time-averaged over a revisit interval (Cho &
Garcia-Molina, TODS 2003):

* freshness (the share of time the copy matches the page): ``(1 - e^-r) / r``;
* age (how long the copy has been stale, on average, in days):
  ``(1/f) (1/2 - 1/r + (1 - e^-r) / r^2)``;
* changes captured per day (a visit detects at most one change): ``f (1 - e^-r)``.

Each objective's optimality condition for the budgeted allocation has the same shape,
``phi(r) = multiplier * cost * scale`` with an increasing ``phi``; :class:`Objective`
carries ``phi``, its inverse and its scale, and the allocation solver works with any of
them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

_SMALL = 1e-3  # below this r, series expansions replace cancelling closed forms


def freshness(rate: ArrayLike, frequency: ArrayLike) -> FloatArray:
    """Time-averaged freshness of a page revisited at fixed intervals (1 if never changing)."""
    lam, f = np.asarray(rate, dtype=np.float64), np.asarray(frequency, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = lam / f
        out = np.where(r < _SMALL, 1.0 - r / 2.0 + r * r / 6.0, -np.expm1(-r) / r)
    out = np.where(lam <= 0, 1.0, np.where(f <= 0, 0.0, out))
    return np.asarray(out, dtype=np.float64)


def age(rate: ArrayLike, frequency: ArrayLike) -> FloatArray:
    """Time-averaged age in days (0 for a page that never changes; inf if never visited)."""
    lam, f = np.asarray(rate, dtype=np.float64), np.asarray(frequency, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = lam / f
        inner = np.where(r < _SMALL, r / 6.0 - r * r / 24.0, 0.5 - 1.0 / r - np.expm1(-r) / (r * r))
        out = inner / f
    out = np.where(lam <= 0, 0.0, np.where(f <= 0, np.inf, out))
    return np.asarray(out, dtype=np.float64)


def changes_captured(rate: ArrayLike, frequency: ArrayLike) -> FloatArray:
    """Expected changes detected per day: each visit sees whether at least one happened."""
    lam, f = np.asarray(rate, dtype=np.float64), np.asarray(frequency, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(f > 0, -f * np.expm1(-lam / np.where(f > 0, f, 1.0)), 0.0)
    return np.asarray(out, dtype=np.float64)


def freshness_gain(
    rate: ArrayLike, days_since_visit: ArrayLike, interval_days: ArrayLike
) -> FloatArray:
    """Expected fresh days bought by visiting now (the cost-aware scheduling article).

    The probability the copy is stale now, ``1 - e^(-rate * days_since_visit)``, times how
    long the page is then expected to stay fresh within the next interval,
    ``(1 - e^(-rate * interval)) / rate`` (the whole interval for a page that never changes).
    """
    lam = np.asarray(rate, dtype=np.float64)
    since = np.asarray(days_since_visit, dtype=np.float64)
    p_stale = -np.expm1(-lam * since)
    return np.asarray(p_stale * fresh_days_after_visit(lam, interval_days), dtype=np.float64)


def fresh_days_after_visit(rate: ArrayLike, interval_days: ArrayLike) -> FloatArray:
    """Expected fresh days within ``interval_days`` after a visit: ``(1 - e^(-rate * I)) / rate``
    (the whole interval for a page that never changes). A first visit of a page never
    fetched buys exactly this: there is no copy, so it is stale with probability 1."""
    lam = np.asarray(rate, dtype=np.float64)
    interval = np.asarray(interval_days, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(lam > 0, -np.expm1(-lam * interval) / lam, interval)
    return np.asarray(out, dtype=np.float64)


def priority(
    value: ArrayLike,
    rate: ArrayLike,
    days_since_visit: ArrayLike,
    cost: ArrayLike,
    interval_days: ArrayLike = 1.0,
) -> FloatArray:
    """Value x freshness a visit buys / its cost: the score a cycle's batch is ranked by."""
    gain = freshness_gain(rate, days_since_visit, interval_days)
    return np.asarray(
        np.asarray(value, dtype=np.float64) * gain / np.asarray(cost), dtype=np.float64
    )


# --------------------------------------------------------------------------- objectives


@dataclass(frozen=True)
class Objective:
    """One thing to maximize, as the allocation solver needs it.

    At the optimum every page with ``0 < f`` inside its bounds satisfies
    ``phi(rate / f) = multiplier * cost * scale(rate, weight)`` (plus the host's own
    multiplier where its capacity binds). ``phi`` increases from 0 at r = 0 to
    ``phi_limit`` (inf when every page always gets some visits); ``phi_slope`` is its
    derivative. ``value(rate, f)`` is the per-page quantity to maximize, per unit weight.
    """

    name: str
    phi: Callable[[FloatArray], FloatArray]
    phi_slope: Callable[[FloatArray], FloatArray]
    phi_limit: float
    scale: Callable[[FloatArray, FloatArray], FloatArray]
    value: Callable[[FloatArray, FloatArray], FloatArray]
    #: ``phi_limit - phi(r)`` without the cancellation of that subtraction near the limit
    #: (None: the subtraction is used)
    phi_gap: Callable[[FloatArray], FloatArray] | None = None


#: Below this r, phi's series replace the closed forms (which cancel: q's closed form loses
#: ~2 eps / r relative, the age phi's ~3 eps / r^2 to its r^2 / 2 - q). At r = 1 both
#: closed forms are good to a few eps and the series below, cut at r^21, to ~1e-18.
_PHI_SERIES = 1.0
#: q(r) = 1 - (1 + r) e^-r = sum_{n >= 2} a_n r^n with a_n = (-1)^n (n - 1) / n!, and the
#: age phi = r^2/2 - q = -sum_{n >= 3} a_n r^n; at r = 1 the first term left out,
#: (n - 1) / n! at n = 22, is 1e-19 of the sum.
_Q_SERIES = np.array([(-1.0) ** n * (n - 1) / math.factorial(n) for n in range(2, 22)])


def _horner(coefficients: FloatArray, r: FloatArray) -> FloatArray:
    """sum_k coefficients[k] r^k."""
    out = np.full_like(r, coefficients[-1])
    for c in coefficients[-2::-1]:
        out *= r
        out += c
    return out


def _q(r: FloatArray) -> FloatArray:
    """1 - (1 + r) e^-r: the marginal freshness (times rate) and marginal capture."""
    small = np.minimum(r, _PHI_SERIES)
    series = small * small * _horner(_Q_SERIES, small)
    with np.errstate(over="ignore"):
        big = -np.expm1(-r) - r * np.exp(-r)
    return np.asarray(np.where(r < _PHI_SERIES, series, big), dtype=np.float64)


def _q_slope(r: FloatArray) -> FloatArray:
    return np.asarray(r * np.exp(-r), dtype=np.float64)


def _q_gap(r: FloatArray) -> FloatArray:
    """1 - q(r) = (1 + r) e^-r, exact to a few ulps where q is within ulps of 1."""
    return np.asarray((1.0 + r) * np.exp(-r), dtype=np.float64)


def _phi_age(r: FloatArray) -> FloatArray:
    """r^2/2 - 1 + (1 + r) e^-r: the marginal age reduction (times rate^2)."""
    small = np.minimum(r, _PHI_SERIES)
    series = -(small**3) * _horner(_Q_SERIES[1:], small)
    with np.errstate(over="ignore"):
        big = r * r / 2.0 - _q(r)
    return np.asarray(np.where(r < _PHI_SERIES, series, big), dtype=np.float64)


def _phi_age_slope(r: FloatArray) -> FloatArray:
    return np.asarray(-r * np.expm1(-r), dtype=np.float64)


def _freshness_value(rate: FloatArray, f: FloatArray) -> FloatArray:
    return freshness(rate, f)


def _negative_age(rate: FloatArray, f: FloatArray) -> FloatArray:
    return -age(rate, f)


def _capture_value(rate: FloatArray, f: FloatArray) -> FloatArray:
    return changes_captured(rate, f)


#: Maximize value-weighted time-averaged freshness (Cho & Garcia-Molina): pages that change
#: far faster than they can be revisited get fewer visits, even none.
FRESHNESS = Objective(
    "freshness", _q, _q_slope, 1.0, lambda rate, w: rate / w, _freshness_value, _q_gap
)
#: Minimize value-weighted expected age: every changing page gets some visits.
AGE = Objective(
    "age", _phi_age, _phi_age_slope, np.inf, lambda rate, w: rate * rate / w, _negative_age
)
#: Maximize value-weighted changes captured, for jobs where every change matters: fast pages
#: get more visits, not fewer (visits in proportion to rate, up to the per-page cap).
CHANGE_CAPTURE = Objective(
    "change_capture", _q, _q_slope, 1.0, lambda rate, w: 1.0 / w, _capture_value, _q_gap
)
OBJECTIVES = {o.name: o for o in (FRESHNESS, AGE, CHANGE_CAPTURE)}
