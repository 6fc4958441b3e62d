"""Behaviour shifts: re-open a page's history when its recent visits disagree with its rate.

A backtest variant (``planner+drift``, ``models/backtest/variants.py``), measured in session
15 and not adopted: on issue 18's shift web the shifted pages have almost no history of
their own when they shift (a cold start a month earlier), so there is nothing old to
discount; what holds them back is how seldom they are visited and their host's prior.

A page's sums (``PageMoments``) weigh every observed interval alike, so after a page
changes behaviour months of old intervals outvote the few new ones: a page that sped up
tenfold is still planned near its old rate weeks later (issue 18's shift web: 29 days or
never to get within 5% of the oracle on the shifted pages). Discounting every page's
history would cost the far larger static majority the evidence its estimate rests on, so
the discount is applied only where the evidence asks for it, as a change detector:

* besides the plain sums, the same sums discounted by age (each interval weighted
  ``0.5 ** (age / half_life)``: ``models.estimation.mixture_prior.DecayedMoments``, which a
  store can keep with the same GROUP BY);
* each page that got a new observation since the last cycle is tested: the generalized
  log-likelihood ratio of its discounted observations between the rate they make most
  likely (on a log grid) and the rate the page was last planned at
  (:func:`surprise`, log-likelihood units);
* a page whose surprise exceeds ``threshold`` is *re-opened*: from then on its history is
  the discounted one (older intervals count by their age at the re-opening), so its next
  estimate rests on what it has done lately, pulled toward its group by the prior as any
  page with little evidence is. A page that did not change behaviour is seldom re-opened
  (the ratio of two fits of the same rate is small) and, if it is, loses only the weight of
  its old intervals.

Censored "changed since the last visit" likelihood, as the estimator's: an unchanged
interval ``t`` contributes ``-r t``, a changed one ``log(1 - e^(-r t))``, the changed ones
through the two-node quadrature matching their first three moment sums
(``models.estimation.rate_solver.two_point_quadrature``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from models.estimation.mixture_prior import DecayedMoments
from models.estimation.rate_solver import two_point_quadrature

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: log-rate grid the discounted observations' best rate is searched on (1e-5..100 a day,
#: 4 points an e-fold: the ratio's maximum is missed by at most ~1% of a unit there)
_GRID = np.exp(np.linspace(np.log(1e-5), np.log(100.0), 65))
_CHUNK = 1 << 14  # pages per block of grid work


class DriftInputError(ValueError):
    """A drift rule or its inputs that cannot be used; the message says why."""


@dataclass(frozen=True)
class DriftRule:
    """When a page's history is re-opened (see the module docstring).

    ``half_life`` (days) discounts old intervals; ``threshold`` is the log-likelihood
    ratio above which the recent observations are judged to disagree with the planned
    rate (3: about the 1.4% tail of a chi-square with one degree of freedom, 2 x 3 = 6).
    """

    half_life: float = 14.0
    threshold: float = 3.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.half_life) and self.half_life > 0):
            raise DriftInputError(f"half_life must be positive days, got {self.half_life}")
        if not self.threshold >= 0:
            raise DriftInputError(f"threshold must be >= 0, got {self.threshold}")


def log_likelihood(recent: DecayedMoments, rate: FloatArray) -> FloatArray:
    """Each page's discounted log-likelihood at ``rate`` (one rate per page, or (pages, k))."""
    t1, w1, t2, w2 = two_point_quadrature(
        recent.n_changed, recent.changed_sum, recent.changed_sum_sq, recent.changed_sum_cube
    )
    return _loglik(recent.unchanged_days, t1, w1, t2, w2, np.asarray(rate, dtype=np.float64))


def _loglik(
    unchanged: FloatArray,
    t1: FloatArray,
    w1: FloatArray,
    t2: FloatArray,
    w2: FloatArray,
    rate: FloatArray,
) -> FloatArray:
    if rate.ndim == 2:
        unchanged, t1, w1, t2, w2 = (x[:, None] for x in (unchanged, t1, w1, t2, w2))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -rate * unchanged
        for t, w in ((t1, w1), (t2, w2)):
            term = w * np.log(-np.expm1(-rate * t))
            out = out + np.where(w > 0, term, 0.0)
    return np.asarray(out, dtype=np.float64)


def surprise(recent: DecayedMoments, rate: FloatArray) -> FloatArray:
    """Per page: max over the grid of the discounted log-likelihood, minus its value at
    ``rate`` (>= 0 up to the grid's resolution; 0 for a page with no observation)."""
    rate = np.asarray(rate, dtype=np.float64)
    n = rate.shape[0]
    if recent.n_intervals.shape != (n,):
        raise DriftInputError(f"one planned rate per page: {n} rates, {recent.n_intervals.shape}")
    t1, w1, t2, w2 = two_point_quadrature(
        recent.n_changed, recent.changed_sum, recent.changed_sum_sq, recent.changed_sum_cube
    )
    out = np.zeros(n)
    grid = _GRID[None, :]
    for lo in range(0, n, _CHUNK):
        part = slice(lo, min(lo + _CHUNK, n))
        args = (recent.unchanged_days[part], t1[part], w1[part], t2[part], w2[part])
        best = _loglik(*args, np.broadcast_to(grid, (args[0].shape[0], grid.shape[1]))).max(1)
        here = _loglik(*args, rate[part])
        out[part] = np.maximum(np.maximum(best, here) - here, 0.0)
    return np.where(recent.n_intervals > 0, out, 0.0)


def surprised_pages(
    recent: DecayedMoments, rate: FloatArray, candidates: IntArray, rule: DriftRule
) -> IntArray:
    """The ``candidates`` (page positions, typically those observed since the last cycle)
    whose discounted observations disagree with their planned ``rate`` (full-length)."""
    candidates = np.asarray(candidates, dtype=np.int64)
    if candidates.shape[0] == 0:
        return candidates
    score = surprise(recent.rows(candidates), np.asarray(rate, dtype=np.float64)[candidates])
    out: IntArray = candidates[score > rule.threshold]
    return out
