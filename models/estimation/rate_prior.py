"""Empirical-Bayes priors for change rates: fitted to the pages' own observations.

Every page's rate gets a Gamma prior from its group (host or page type): one shape shared
by all groups (how spread a group's rates are) and a mean rate per group (its level).
Both maximize the marginal likelihood of the observations (the likelihood integrated over
the prior), which is what makes the smoothing honest: fitting a prior to the pages' plain
estimates instead would be badly biased, because pages that never changed in a short
history all look alike, so the spread of rates, and how slow the slowest pages are, would
be lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, special

from models.estimation.rate_data import (
    GammaPrior,
    IntervalStats,
    PageMoments,
    group_codes,
    select_pages,
    weak_prior,
)
from models.estimation.rate_solver import bincount

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Grid in log-rate on which posterior expectations are integrated during prior fitting.
_GRID = np.linspace(np.log(1e-5), np.log(100.0), 100)


def fit_group_priors(
    stats: IntervalStats | PageMoments,
    groups: ArrayLike | None,
    *,
    sample_pages: int = 10_000,
    sample_per_group: int = 32,
    max_group_sample: int = 100_000,
    pseudo_pages: float = 5.0,
    seed: int = 0,
) -> GammaPrior:
    """Empirical-Bayes Gamma priors: one shape shared by all groups, a mean rate per group.

    1. Shape and overall mean maximize the marginal likelihood of the observations of a
       random sample of ``sample_pages`` observed pages (closed form for pages that never
       changed; a fixed log-rate grid integrates the others), with scipy's optimizer.
    2. With the shape fixed, each group's mean rate is fitted by EM on up to
       ``sample_per_group`` of its pages (``max_group_sample`` in all), shrunk toward the
       overall mean by ``pseudo_pages`` pages, so a group of three pages barely moves.

    With no observed page at all the prior is ``models.estimation.rate_data.weak_prior``.
    """
    p = stats.size
    codes = group_codes(groups, p)
    n_groups = int(codes.max()) + 1 if p else 0
    observed = np.flatnonzero(stats.n_intervals > 0)
    if observed.shape[0] == 0:
        return weak_prior(codes, n_groups)
    rng = np.random.default_rng(seed)

    sample = observed
    if observed.shape[0] > sample_pages:
        sample = np.sort(rng.choice(observed, sample_pages, replace=False))
    shape, overall_mean = _fit_gamma(_GridData.build(stats.take(sample)))

    observed_codes = codes[observed]
    count = bincount(observed_codes, np.ones(observed.shape[0]), n_groups)
    per_group = min(float(sample_per_group), max_group_sample / max(n_groups, 1))
    keep = np.minimum(1.0, per_group / np.maximum(count, 1.0))[observed_codes]
    chosen = observed[rng.random(observed.shape[0]) < keep]
    data = _GridData.build(stats.take(chosen))
    chosen_codes = codes[chosen]
    n_chosen = bincount(chosen_codes, np.ones(chosen.shape[0]), n_groups)
    group_mean = np.full(n_groups, overall_mean)
    for _ in range(50):
        e_rate = data.expected_rate(shape, (shape / group_mean)[chosen_codes])
        new_mean = (bincount(chosen_codes, e_rate, n_groups) + pseudo_pages * overall_mean) / (
            n_chosen + pseudo_pages
        )
        moved = float(np.max(np.abs(np.log(new_mean / group_mean))))
        group_mean = new_mean
        if moved < 1e-4:
            break
    return GammaPrior(np.full(n_groups, shape), shape / group_mean, codes)


@dataclass(frozen=True)
class _GridData:
    """Pages' log-likelihoods on a log-rate grid, for fitting priors.

    Pages that never changed keep only their unchanged days: their likelihood
    ``exp(-rate U)`` integrates against a Gamma prior in closed form.
    """

    quiet: NDArray[np.bool_]  # per page: no change seen
    unchanged_days: FloatArray  # per page
    busy_loglik: FloatArray  # (pages with a change, grid): sum_k w_k log(1 - e^{-r t_k}) - r U

    @classmethod
    def build(cls, stats: IntervalStats) -> _GridData:
        # pages with trusted Last-Modified ages (or exposure) go on the grid
        quiet = (stats.n_changed == 0) & (stats.ages()[1] == 0)
        sub = select_pages(stats, np.flatnonzero(~quiet))
        rate = np.exp(_GRID)
        contrib = sub.node_weight[:, None] * np.log(-np.expm1(-sub.node_days[:, None] * rate))
        order = np.argsort(sub.node_page, kind="stable")  # usually already sorted
        rows = sub.node_page[order]
        loglik = np.zeros((sub.size, _GRID.shape[0]))
        if rows.shape[0]:
            # a page with trusted Last-Modified ages may have no censored changed interval
            starts = np.flatnonzero(np.r_[True, np.diff(rows) != 0])
            loglik[rows[starts]] += np.add.reduceat(contrib[order], starts, axis=0)
        sub_aged, sub_aged_days = sub.ages()
        loglik += sub_aged[:, None] * _GRID[None, :]
        loglik -= (sub.unchanged_days + sub_aged_days)[:, None] * rate[None, :]
        return cls(quiet, stats.unchanged_days, loglik)

    def _log_posterior(self, shape: float, rate: FloatArray) -> FloatArray:
        """Unnormalized log posterior of log-rate on the grid, for the pages with a change."""
        grid_rate = np.exp(_GRID)
        busy_rate = rate[~self.quiet]
        out: FloatArray = self.busy_loglik + shape * _GRID - busy_rate[:, None] * grid_rate
        return out

    def log_marginal(self, shape: float, rate: float) -> tuple[float, float, float]:
        """Log marginal likelihood of all pages under Gamma(shape, rate), and its gradient.

        The gradient uses Fisher's identity: the derivative of the log marginal is the
        posterior expectation of the derivative of the log prior.
        """
        quiet_days = self.unchanged_days[self.quiet]
        ratio = np.log(rate / (rate + quiet_days))
        value = shape * float(ratio.sum())
        d_shape = float(ratio.sum())
        d_rate = shape * float(np.sum(1.0 / rate - 1.0 / (rate + quiet_days)))
        n_busy = self.busy_loglik.shape[0]
        if n_busy:
            log_post = self._log_posterior(shape, np.full(self.quiet.shape[0], rate))
            top = log_post.max(axis=1, keepdims=True)
            weight = np.exp(log_post - top)
            total = weight.sum(axis=1)
            norm = shape * np.log(rate) - special.gammaln(shape) + np.log(_GRID[1] - _GRID[0])
            value += float(np.sum(np.log(total) + top[:, 0])) + norm * n_busy
            e_log = (weight @ _GRID) / total
            e_rate = (weight @ np.exp(_GRID)) / total
            d_shape += float(np.sum(e_log)) + (np.log(rate) - special.digamma(shape)) * n_busy
            d_rate += float(np.sum(shape / rate - e_rate))
        return value, d_shape, d_rate

    def expected_rate(self, shape: float, rate: FloatArray) -> FloatArray:
        """Posterior mean rate of every page under Gamma(shape, rate[page])."""
        out: FloatArray = shape / (rate + self.unchanged_days)
        if self.busy_loglik.shape[0]:
            log_post = self._log_posterior(shape, rate)
            log_post -= log_post.max(axis=1, keepdims=True)
            weight = np.exp(log_post)
            out[~self.quiet] = (weight @ np.exp(_GRID)) / weight.sum(axis=1)
        return out


def _fit_gamma(data: _GridData) -> tuple[float, float]:
    """Shape and mean of the Gamma prior maximizing the sample's marginal likelihood."""
    size = max(data.quiet.shape[0], 1)

    def loss(x: FloatArray) -> tuple[float, FloatArray]:
        shape, mean = np.exp(x)
        rate = shape / mean
        value, d_shape, d_rate = data.log_marginal(float(shape), float(rate))
        # chain rule to (log shape, log mean): rate = shape / mean
        grad_log_shape = shape * d_shape + rate * d_rate
        grad_log_mean = -rate * d_rate
        return -value / size, -np.array([grad_log_shape, grad_log_mean]) / size

    best = optimize.minimize(
        loss,
        np.array([0.0, np.log(0.1)]),
        jac=True,
        method="L-BFGS-B",
        bounds=[(-7.0, 9.0), (np.log(1e-5), np.log(100.0))],
    )
    shape, mean = np.exp(best.x)
    return float(shape), float(mean)
