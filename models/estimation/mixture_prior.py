"""A robust group prior for change rates: "like its group, or like the web at large".

``models/estimation/rate_prior.py`` fits one Gamma shape against one overall mean and then a mean
per
group. Fitted that way the shape measures the spread of *all* rates on the web (about 0.04
on a measured-like web, whose rates run from once a decade to hourly), so the prior carries
almost no weight: a page seen once or twice is estimated from those observations alone,
even when the hundreds of pages of its template behave alike. A strong group prior alone
would be wrong the other way: a page that changes hourly in a template of static pages
would be held static forever.

:class:`MixturePrior` is a two-component prior fitted by marginal likelihood (EM on a sample
of pages, on a log-rate grid):

* with probability ``1 - odd_share`` a page's rate is ``Gamma(shape, shape / mean_g)``
  around its group's mean; ``shape`` (the within-group spread) is shared by all groups;
* with probability ``odd_share`` the page is odd: its rate follows ``level_prior``, the
  distribution of group rates across the whole web (a histogram on the grid).

A group's mean is the posterior mean of its pages' pooled observations under
``level_prior``; that distribution is learned from all groups, so a group whose pages
changed at every visit is placed where such groups are (hours, not the web's average:
a Gamma pseudo-observation would pull it there, since the likelihood is flat above a few
changes a day).

Estimates: every page the group component explains better gets the posterior mode under
its group's Gamma (``estimate_from_moments`` with a per-group ``GammaPrior``, unchanged);
an odd page gets its posterior under ``level_prior``, computed on the grid (geometric mean
and standard deviation of the rate). Pages with no history get their group's typical rate,
the geometric mean of its Gamma (``MixturePrior.group_typical``; also their ``prior_rate``);
the low end of a 90% interval is not clamped (a rate at the floor may be slower still).

A page with observed intervals is then planned at its **freshness-equivalent rate**: the
rate whose fresh share ``(1 - e^(-rI)) / (rI)`` at the page's mean observed interval ``I`` is
the share its mixture posterior expects (``CERTAINTY_EQUIVALENT``; between the posterior's
harmonic and arithmetic means). The share is convex in r, so a posterior's spread matters,
not only its centre: pages that changed at every long interval have a likelihood flat above
a few changes a month, and their centre sat where the level distribution's untested mass
put it (issue 18: hosts at ~1 a day estimated at 7 and given up). ``log_std`` stays the
posterior's (the 90% interval spans +-1.645 of it around the rate planned).

Trusted Last-Modified ages (``PageMoments.aged_count`` / ``aged_days``, see
``models.estimation.rate_data.with_trusted_ages``) add ``K log r - r S`` to a page's log-likelihood:
on the grid, to the pooled group levels, and in closed form against a Gamma (a page with no
censored changed interval keeps an exact marginal likelihood).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from models.estimation import grid_kernels
from models.estimation.gamma_core import MAX_RATE, MIN_RATE, estimate_with_gamma, rate_cap
from models.estimation.rate_data import (
    GammaPrior,
    IntervalStats,
    PageMoments,
    RateEstimates,
    group_codes,
)
from models.estimation.rate_solver import bincount, two_point_quadrature

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: log-rate grid the marginal likelihoods are integrated on (1e-5 to 100 changes/day)
_GRID = np.linspace(np.log(1e-5), np.log(100.0), 97)
_RATE = np.exp(_GRID)
_STEP = float(_GRID[1] - _GRID[0])
_CHUNK = 1 << 15  # pages per block of grid work
_FLOOR = 0.02  # share of the level distribution spread evenly (no rate is ruled out)
_Z90 = float(special.ndtri(0.95))  # a 90% interval is +-1.645 standard errors of the log


@dataclass(frozen=True)
class DecayedMoments:
    """Per-page observation sums with old observations discounted (float counts).

    What a group's level is fitted on when behaviour may shift: after a section of a site
    wakes up, months of silence would otherwise outvote days of changes.
    """

    n_intervals: FloatArray
    n_changed: FloatArray
    unchanged_days: FloatArray
    changed_sum: FloatArray
    changed_sum_sq: FloatArray
    changed_sum_cube: FloatArray
    #: trusted Last-Modified ages (count, sum of days), as in ``PageMoments``; the decayed
    #: sums a learner keeps (``add``) carry none
    aged_count: FloatArray | None = None
    aged_days: FloatArray | None = None

    @classmethod
    def zeros(cls, size: int) -> DecayedMoments:
        return cls(*(np.zeros(size) for _ in range(6)))

    def arrays(self) -> tuple[FloatArray, ...]:
        return (
            self.n_intervals,
            self.n_changed,
            self.unchanged_days,
            self.changed_sum,
            self.changed_sum_sq,
            self.changed_sum_cube,
        )

    def decay(self, factor: float) -> None:
        if factor != 1.0:
            for values in self.arrays():
                values *= factor

    def add(self, pages: IntArray, changed: NDArray[np.bool_], interval: FloatArray) -> None:
        t = np.where(changed, interval, 0.0)
        self.n_intervals[pages] += 1.0
        self.n_changed[pages] += changed
        self.unchanged_days[pages] += np.where(changed, 0.0, interval)
        self.changed_sum[pages] += t
        self.changed_sum_sq[pages] += t * t
        self.changed_sum_cube[pages] += t * t * t

    def rows(self, index: IntArray | slice) -> DecayedMoments:
        count, days = self.aged_count, self.aged_days
        n_int, n_chg, unchanged, s1, s2, s3 = (values[index] for values in self.arrays())
        return DecayedMoments(
            n_int,
            n_chg,
            unchanged,
            s1,
            s2,
            s3,
            aged_count=None if count is None else count[index],
            aged_days=None if days is None else days[index],
        )


@dataclass(frozen=True)
class MixturePrior:
    """Group component ``Gamma(shape, shape / group_mean)``, odd component ``level_prior``."""

    shape: float  # within-group spread: Gamma shape around a known group level
    group_log_rate: FloatArray  # per group: posterior mean of log(level)
    group_log_var: FloatArray  # per group: posterior variance of log(level)
    odd_share: float
    level_prior: FloatArray  # distribution of group rates on the log-rate grid (sums to 1)

    @property
    def group_mean(self) -> FloatArray:
        """Each group's Gamma mean (changes/day)."""
        shape, rate = group_gamma_parameters(self.shape, self.group_log_rate, self.group_log_var)
        return shape / rate

    def group_typical(self) -> FloatArray:
        """Each group's typical rate: the geometric mean ``exp(E[log r])`` of its Gamma,
        what a page of the group never observed is estimated at (changes/day)."""
        a, b = group_gamma_parameters(self.shape, self.group_log_rate, self.group_log_var)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            typical = np.exp(special.digamma(a) - np.log(b))
        # b infinite gives NaN (no rate), b = 0 gives inf (the caller's cap)
        out: FloatArray = np.maximum(np.where(np.isnan(typical), MIN_RATE, typical), MIN_RATE)
        return out

    def group_gamma(self, groups: IntArray) -> GammaPrior:
        shape, rate = group_gamma_parameters(self.shape, self.group_log_rate, self.group_log_var)
        return GammaPrior(shape, rate, groups)

    @cached_property
    def gamma_rows(self) -> grid_kernels.GammaRows:
        """Each group's Gamma as a row of factors on the grid (built once per prior, shared
        by every block's marginals and fresh shares)."""
        shape, rate = group_gamma_parameters(self.shape, self.group_log_rate, self.group_log_var)
        return grid_kernels.GammaRows.of(shape, rate, _GRID)

    def estimate(
        self, moments: PageMoments, groups: IntArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per page: rate, standard error of log rate, and probability of being odd.

        Each block's grids are built again, not kept from the fit's pass over the same pages:
        at 10 M pages keeping them took 2 GiB of fresh memory, whose first-touch faults on
        this VM cost more system time than building them again costs (alternating, load 18:
        19.5 against 21.2 s of CPU, 2.6 GB less memory; at 1 M the same CPU, 300 MB less)."""
        est = estimate_with_gamma(moments, self.group_gamma(groups), exact_quiet=False)
        rate, log_std = est.rate, est.log_std  # fresh arrays, nothing else holds them
        odd = np.zeros(moments.size)
        aged_count, aged_days = moments.ages()
        cap_of = rate_cap(aged_count)
        observed = (moments.n_intervals > 0) | (aged_days > 0)
        seen = np.flatnonzero(observed)
        # A page never observed is at its group's prior, whose log-rate mode is the Gamma's
        # mean: for a wide group (small shape) many times its typical page's rate, so a
        # catalog seen little would look fast and its first visits cheap to give up. It
        # gets the group's typical rate instead, the geometric mean exp(E[log r])
        # (issue 18: from a cold start at 0.05 N this closed 81% of the gap, not 62%).
        blank = np.flatnonzero(~observed)
        rate[blank] = np.clip(self.group_typical()[groups[blank]], MIN_RATE, cap_of[blank])
        log_odd_prior = np.log(self.odd_share) - np.log1p(-self.odd_share)
        rows = self.gamma_rows  # built here, before the threads share it
        observed_days = moments.observed_days

        def block(lo: int, hi: int) -> None:
            pages = seen[lo:hi]
            codes = groups[pages]
            grid = _PageGrid.build(moments.take(pages))
            tried = moments.n_intervals[pages]
            interval = observed_days[pages] / np.maximum(tried, 1)
            busy = np.flatnonzero(~grid.quiet)
            log_group, log_odd, mean_log, sd_log, post = grid.posterior(
                rows, codes, self.level_prior, interval[busy] if CERTAINTY_EQUIVALENT else None
            )
            p_odd = special.expit(log_odd_prior + log_odd - log_group)
            odd[pages] = p_odd
            use = p_odd > 0.5
            rate[pages[use]] = np.clip(np.exp(mean_log[use]), MIN_RATE, cap_of[pages[use]])
            log_std[pages[use]] = sd_log[use]
            if CERTAINTY_EQUIVALENT:
                assert post.gamma_share is not None and post.odd_share is not None
                # every busy page has an interval; quiet ones only if seen more than by age
                p_busy = p_odd[busy]
                shares = [(busy, (1.0 - p_busy) * post.gamma_share + p_busy * post.odd_share)]
                calm = np.flatnonzero(grid.quiet & (tried > 0))
                if calm.shape[0]:
                    calm_share = grid.calm_fresh_shares(
                        calm, rows, codes, self.level_prior, p_odd, interval
                    )
                    shares.append((calm, calm_share))
                for local, share in shares:
                    sub = pages[local]
                    ce = _inverse_fresh_share(share) / interval[local]
                    rate[sub] = np.clip(ce, MIN_RATE, cap_of[sub])

        _in_blocks(seen.shape[0], block)
        return rate, log_std, odd


#: plan a page at its posterior's freshness-equivalent rate (``MixturePrior.estimate``)
CERTAINTY_EQUIVALENT = True


def _fresh_share(x: FloatArray) -> FloatArray:
    """``(1 - exp(-x)) / x``: the share of an interval a copy stays fresh, x = rate x interval."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x > 1e-12, -np.expm1(-x) / np.maximum(x, 1e-300), 1.0 - 0.5 * x)
    return np.asarray(out, dtype=np.float64)


_CE_X = np.exp(np.linspace(np.log(1e-9), np.log(1e5), 4_000))
_CE_SHARE = _fresh_share(_CE_X)


def _inverse_fresh_share(share: FloatArray) -> FloatArray:
    """x with ``(1 - exp(-x)) / x = share`` (decreasing in x), by interpolation."""
    out = np.interp(-share, -_CE_SHARE, _CE_X)
    return np.asarray(out, dtype=np.float64)


def estimate_with_mixture_prior(
    moments: PageMoments,
    groups: IntArray | None = None,
    *,
    start: MixturePrior | None = None,
) -> tuple[RateEstimates, MixturePrior]:
    """Every page's rate under a freshly fitted mixture prior (the planner's estimator).

    ``groups`` (dense codes per page: host x page type, or host) are what pages share;
    ``start`` warm-starts the fit from yesterday's prior. Returns the estimates in the shape
    of ``models.estimation.change_rate.estimate_from_moments`` (a 90% interval from the log-rate's
    standard error; ``prior_rate`` the group's typical rate, what a page never observed
    gets) and the fitted prior.
    """
    codes = group_codes(groups, moments.size)
    prior = fit_mixture_prior(moments, codes, start=start)
    rate, log_std, _ = prior.estimate(moments, codes)
    spread = np.exp(_Z90 * log_std)
    estimates = RateEstimates(
        page_ids=moments.page_ids,
        rate=rate,
        log_std=log_std,
        rate_low=rate / spread,  # below MIN_RATE where the rate sits at the floor
        rate_high=np.minimum(rate * spread, rate_cap(moments.ages()[0])),
        n_intervals=moments.n_intervals,
        n_changed=moments.all_changed,
        observed_days=moments.observed_days,
        prior_rate=np.minimum(prior.group_typical()[codes], MAX_RATE),
    )
    return estimates, prior


def fit_mixture_prior(
    moments: PageMoments,
    groups: IntArray,
    *,
    per_group: int = 64,
    max_pages: int = 50_000,
    iterations: int = 4,
    start: MixturePrior | None = None,
    recent: DecayedMoments | None = None,
    seed: int = 0,
) -> MixturePrior:
    """Fit the mixture prior on up to ``per_group`` observed pages of each group.

    Alternates ``iterations`` times (EM): group levels and the level distribution from the
    pages' pooled observations, each page weighted by its probability of following its
    group; the shared within-group shape by maximizing the weighted marginal likelihood;
    each page's probability of being odd, and the odd share. ``start`` warm-starts.
    """
    n_groups = int(groups.max()) + 1 if groups.shape[0] else 1
    flat = np.full(_GRID.shape[0], 1.0 / _GRID.shape[0])
    observed = np.flatnonzero((moments.n_intervals > 0) | (moments.ages()[1] > 0))
    if observed.shape[0] == 0:  # nothing seen: no group is known, every level possible
        centre = float(flat @ _GRID)
        spread = float(flat @ _GRID**2) - centre**2
        return MixturePrior(1.0, np.full(n_groups, centre), np.full(n_groups, spread), 0.1, flat)
    rng = np.random.default_rng(seed)
    count = np.bincount(groups[observed], minlength=n_groups).astype(np.float64)
    take = min(float(per_group), max_pages / max(float((count > 0).sum()), 1.0))
    chance = np.minimum(1.0, take / np.maximum(count, 1.0))[groups[observed]]
    sample = observed[rng.random(observed.shape[0]) < chance]
    codes = groups[sample]
    part = moments.rows(sample)
    pages = _PageGrid.build(part.to_stats())
    level_data = _level_data(moments, sample, recent)

    warm = start is not None and start.group_log_rate.shape[0] == n_groups
    shape = start.shape if start is not None else 1.0
    odd_share = start.odd_share if start is not None else 0.1
    level_prior = start.level_prior if start is not None else flat
    regular = np.ones(sample.shape[0])
    if warm and start is not None:
        regular = 1.0 - _odd(start, pages, codes)
    prior = start
    sampled = sample.shape[0] < observed.shape[0]
    # the loss's Gamma rows: one per group with a busy sampled page (``busy_row``: each
    # busy page's); the quiet pages' marginals are in closed form
    busy_groups, busy_row = np.unique(codes[~pages.quiet], return_inverse=True)
    busy_row = busy_row.reshape(-1)
    for step in range(iterations):
        if sampled and prior is not None and step == iterations - 1:
            # the last round pools each group's level over all its observed pages
            current = MixturePrior(
                shape, prior.group_log_rate, prior.group_log_var, odd_share, level_prior
            )
            log_rate, log_var, level_prior = _levels_from_every_page(
                current, moments, groups, observed, recent, n_groups
            )
        else:
            log_rate, log_var, level_prior = _group_levels(
                level_data, codes, regular, n_groups, level_prior
            )

        def loss(
            log_shape: float,
            w: FloatArray = regular,
            centre: FloatArray = log_rate,
            spread: FloatArray = log_var,
        ) -> float:
            a, b = group_gamma_parameters(float(np.exp(log_shape)), centre, spread)
            # grid rows only for the groups of busy sampled pages (the others' marginals
            # are in closed form): each row is the same, built alone or with all groups
            rows = grid_kernels.GammaRows.of(a[busy_groups], b[busy_groups], _GRID)
            marginal = pages.log_marginal_of(a, b, codes, rows, busy_row)
            return -grid_kernels.weighted_total(w, marginal)

        best = optimize.minimize_scalar(
            loss, bounds=(np.log(0.05), np.log(50.0)), method="bounded", options={"xatol": 0.05}
        )
        shape = float(np.exp(best.x))
        prior = MixturePrior(shape, log_rate, log_var, odd_share, level_prior)
        odd = _odd(prior, pages, codes)
        odd_share = float(np.clip(odd.mean(), 1e-3, 0.5))
        regular = 1.0 - odd
    assert prior is not None
    return MixturePrior(shape, prior.group_log_rate, prior.group_log_var, odd_share, level_prior)


def _level_data(
    moments: PageMoments, index: IntArray | slice, recent: DecayedMoments | None
) -> DecayedMoments:
    """What group levels are pooled from, for pages ``index`` (positions, or a slice: the
    same rows as views): the discounted sums when the learner keeps them, else the pages'
    own sums."""
    if recent is not None:
        return recent.rows(index)
    part = moments.rows(index)
    return DecayedMoments(
        part.n_intervals.astype(np.float64),
        part.n_changed.astype(np.float64),
        part.unchanged_days,
        part.changed_sum,
        part.changed_sum_sq,
        part.changed_sum_cube,
        part.aged_count,
        part.aged_days,
    )


def _levels_from_every_page(
    prior: MixturePrior,
    moments: PageMoments,
    groups: IntArray,
    observed: IntArray,
    recent: DecayedMoments | None,
    n_groups: int,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each group's level pooled over all its observed pages (``_group_levels``' output).

    The mixture is fitted on a sample of at most ``per_group`` pages a group and
    ``max_pages`` in all; on a large web that cap leaves a few pages a group (50,000 over
    15,000 groups is 3), and levels pooled from so few stay wide, so the prior smooths
    little: at 100,000 pages a sample of 5,000 instead of 50,000 cost the backtest's planner
    3 points of the oracle-uniform gap. Pooling every page is cheap once each page's
    probability of following its group is known: one pass over the observed pages under
    ``prior``, as an estimate makes.
    """
    regular = np.empty(observed.shape[0])
    every = observed.shape[0] == moments.size  # every page observed: views, not gathers
    codes = groups if every else groups[observed]
    prior.gamma_rows  # noqa: B018 (built once, before the threads share it)

    def block(lo: int, hi: int) -> None:
        grid = _PageGrid.build(moments.take(observed[lo:hi]))
        regular[lo:hi] = 1.0 - _odd(prior, grid, codes[lo:hi])

    _in_blocks(observed.shape[0], block)
    level_data = _level_data(moments, slice(None) if every else observed, recent)
    return _group_levels(level_data, codes, regular, n_groups, prior.level_prior)


def group_gamma_parameters(
    shape: float, log_rate: FloatArray, log_var: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Per group, the Gamma a page's rate follows when its group's level is uncertain.

    Around a known level ``m`` a page's rate is Gamma(shape, shape / m), whose log has
    variance trigamma(shape). With the level's log known only to variance ``log_var``, the
    variances add: the group's Gamma gets the shape whose trigamma is their sum (a group
    seen little gives a weak prior) and the rate that keeps the mean of the log in place.
    """
    target = special.polygamma(1, shape) + np.maximum(log_var, 0.0)
    a = _inverse_trigamma(target)
    # E[log rate] under Gamma(a, b) is digamma(a) - log(b): keep it at the group's centre
    # plus the offset the within-group Gamma has (digamma(shape) - log(shape)).
    log_b = special.digamma(a) - log_rate - (special.digamma(shape) - np.log(shape))
    return a, np.exp(log_b)


def _inverse_trigamma(y: FloatArray) -> FloatArray:
    """x with trigamma(x) = y for y > 0, by interpolation in a table of log trigamma.

    trigamma falls monotonically and smoothly in log-log scale; 4,000 points from 1e-6 to
    1e6 give about 1e-6 relative accuracy, at the cost of one ``np.interp``.
    """
    log_y = np.log(np.asarray(y, dtype=np.float64))
    # np.interp needs increasing abscissae: log trigamma decreases with log x
    out = np.exp(np.interp(-log_y, -_TRIGAMMA_LOG, _TRIGAMMA_X))
    return np.asarray(out, dtype=np.float64)


_TRIGAMMA_X = np.linspace(np.log(1e-6), np.log(1e6), 4_000)
_TRIGAMMA_LOG = np.log(special.polygamma(1, np.exp(_TRIGAMMA_X)))


def _odd(prior: MixturePrior, pages: _PageGrid, codes: IntArray) -> FloatArray:
    """Posterior probability of the odd component, per page."""
    log_group, log_odd, _, _, _ = pages.posterior(prior.gamma_rows, codes, prior.level_prior)
    log_odds = np.log(prior.odd_share) - np.log1p(-prior.odd_share) + log_odd - log_group
    return np.asarray(special.expit(log_odds), dtype=np.float64)


def _group_levels(
    part: DecayedMoments,
    codes: IntArray,
    weight: FloatArray,
    n_groups: int,
    level_prior: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each group's level (mean and variance of its log), and the distribution of levels.

    A group's observations are pooled as if its pages shared one rate (each page weighted
    by ``weight``, its probability of following the group; the changed intervals through
    the two-node quadrature of their moments, as in the estimators). The distribution of
    those levels across groups is refitted by EM (a histogram on the grid), and each
    group's level is its posterior under it, in log space: a group seen little keeps a
    wide posterior instead of a mean pulled up by the fastest levels it might have.
    """

    def pooled(values: FloatArray) -> FloatArray:
        return bincount(codes, weight * values, n_groups)

    n_changed = pooled(part.n_changed)
    t1, w1, t2, w2 = two_point_quadrature(
        n_changed,
        pooled(part.changed_sum),
        pooled(part.changed_sum_sq),
        pooled(part.changed_sum_cube),
    )
    unchanged = pooled(part.unchanged_days)
    informed = pooled(part.n_intervals) > 0
    # A group with nothing pooled (no sampled page, or none weighted) has the log-likelihood
    # 0 at every grid point (its quadrature weights are 0), so the likelihood 1: only the
    # others' are computed (a sampled fit of 100,000 groups pools at most 50,000 pages).
    live = (n_changed != 0) | (unchanged != 0)
    aged = aged_days = None
    if part.aged_count is not None and part.aged_days is not None:
        aged, aged_days = pooled(part.aged_count), pooled(part.aged_days)
        informed |= aged > 0
        live |= (aged != 0) | (aged_days != 0)
    rows = np.flatnonzero(live)
    loglik = (
        _log_changed(t1[rows], w1[rows])
        + _log_changed(t2[rows], w2[rows])
        - unchanged[rows, None] * _RATE
    )
    if aged is not None and aged_days is not None:
        loglik += aged[rows, None] * _GRID - aged_days[rows, None] * _RATE
    likelihood = np.ones((n_groups, _GRID.shape[0]))
    likelihood[rows] = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    prior = level_prior
    # With no informed group (a first cycle whose every page dates its last change beyond
    # the first-age horizon leaves exposure only) the distribution has nothing to learn
    # from and keeps its start: an average over no group would be NaN.
    # post[informed].mean(0) = prior * mean_i(L_i / (L_i . prior)): two products a step
    # (einsum, not BLAS: OpenBLAS threads spin on this shared machine, 5x the CPU)
    seen_likelihood = likelihood[informed]
    for _ in range(20 if informed.any() else 0):
        share = np.einsum(
            "i,ij->j", 1.0 / np.einsum("ij,j->i", seen_likelihood, prior), seen_likelihood
        )
        prior = (1 - _FLOOR) * prior * share / seen_likelihood.shape[0] + _FLOOR / _GRID.shape[0]
    post = likelihood * prior
    post /= post.sum(axis=1, keepdims=True)
    mean = np.einsum("ij,j->i", post, _GRID)
    var = np.maximum(np.einsum("ij,j->i", post, _GRID**2) - mean**2, 0.0)
    return np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64), prior


def _log_changed(days: FloatArray, weight: FloatArray) -> FloatArray:
    """``weight * log(1 - exp(-rate * days))`` on the grid, 0 where the weight is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = weight[:, None] * np.log(-np.expm1(-np.maximum(days, 1e-12)[:, None] * _RATE))
    return np.where(weight[:, None] > 0, out, 0.0)


def _busy_loglik(stats: IntervalStats, busy: IntArray) -> FloatArray:
    """The log-likelihoods on the grid of the pages ``busy`` (sorted positions, each with a
    censored changed interval): ``(pages, grid)``."""
    return _busy_grid(stats, busy, None)


def _busy_weights(stats: IntervalStats, busy: IntArray) -> tuple[FloatArray, FloatArray]:
    """``grid_kernels.grid_weights(_busy_loglik(stats, busy), in_place=True)``: the same
    numbers, each block of rows turned into weights while it is in the cache."""
    top = np.empty(busy.shape[0])
    return top, _busy_grid(stats, busy, top)


def _busy_grid(stats: IntervalStats, busy: IntArray, top: FloatArray | None) -> FloatArray:
    """``_busy_loglik``, or with ``top`` (one entry per busy page) its grid weights, each
    row's maximum written into ``top``."""
    aged, aged_days = stats.ages()
    exposure = stats.unchanged_days[busy] + aged_days[busy]
    if busy.shape[0] == 0:
        return np.zeros((0, _GRID.shape[0]))
    position = np.full(stats.size, -1)
    position[busy] = np.arange(busy.shape[0])
    rows = position[stats.node_page]
    days, weight = stats.node_days, stats.node_weight
    if busy.shape[0] < stats.size and (rows < 0).any():  # some pages' rows only
        keep = rows >= 0
        rows, days, weight = rows[keep], days[keep], weight[keep]
    busy_aged = aged[busy]
    with_age = bool(busy_aged.any())

    def finish(lo: int, hi: int, block: FloatArray) -> None:
        block -= exposure[lo:hi, None] * _RATE[None, :]
        if with_age:
            block += busy_aged[lo:hi, None] * _GRID[None, :]
        if top is not None:
            top[lo:hi] = grid_kernels.grid_weights(block, in_place=True)[0]

    # w log(1 - exp(-t r)) from a table (grid_kernels: within 1.4e-9 per interval)
    return grid_kernels.changed_loglik(rows, days, weight, busy.shape[0], _GRID, finish=finish)


@dataclass(frozen=True)
class _PageGrid:
    """Pages' likelihoods on the log-rate grid.

    Pages without a censored changed interval ("quiet") have the conjugate likelihood
    ``K log r - r E`` (K trusted Last-Modified ages; exposure E: unchanged days plus the
    ages), kept as two numbers; the others ("busy") get their likelihood on the grid, as
    ``busy_weights``: each row's maximum and ``exp(loglik - max)``. Their log-likelihoods
    are not kept (the weights are written over them); the few a sum needs (a marginal that
    underflows) are built again by ``busy_rows_loglik``.
    """

    quiet: NDArray[np.bool_]
    exposure: FloatArray  # unchanged days + trusted ages
    aged: FloatArray  # K: observations with a trusted age
    busy_weights: tuple[FloatArray, FloatArray]  # busy pages' (top, exp(loglik - top))
    busy_rows_loglik: Callable[[IntArray], FloatArray]  # busy rows -> their log-likelihoods

    @classmethod
    def build(cls, stats: IntervalStats) -> _PageGrid:
        return cls.of(stats, _busy_loglik, _busy_weights)

    @classmethod
    def of(
        cls,
        stats: IntervalStats,
        busy_loglik: Callable[[IntervalStats, IntArray], FloatArray],
        busy_weights: Callable[[IntervalStats, IntArray], tuple[FloatArray, FloatArray]]
        | None = None,
    ) -> _PageGrid:
        """The grid of ``stats``' pages, their busy rows' log-likelihoods from ``busy_loglik``
        (their weights from ``busy_weights`` if given: the same numbers, made in one pass)."""
        aged, aged_days = stats.ages()
        quiet = stats.n_changed == 0
        busy = np.flatnonzero(~quiet)
        if busy_weights is not None:
            weights = busy_weights(stats, busy)
        else:
            weights = grid_kernels.grid_weights(busy_loglik(stats, busy), in_place=True)

        def rows_loglik(at: IntArray) -> FloatArray:
            return busy_loglik(stats, busy[at])

        return cls(quiet, stats.unchanged_days + aged_days, aged, weights, rows_loglik)

    @property
    def n_busy(self) -> int:
        return int(self.busy_weights[1].shape[0])

    def loglik(self) -> FloatArray:
        """Every page's log-likelihood on the grid (built again for the busy pages)."""
        out = self.aged[:, None] * _GRID[None, :] - self.exposure[:, None] * _RATE[None, :]
        out[~self.quiet] = self.busy_rows_loglik(np.arange(self.n_busy))
        return out

    def _quiet_log_marginal(self, shape: FloatArray, rate: FloatArray) -> FloatArray:
        """Exact for quiet pages: Gamma(a, b) against r^K exp(-r E) (every page's slot)."""
        k = self.aged
        out = (
            shape * np.log(rate)
            - (shape + k) * np.log(rate + self.exposure)
            + special.gammaln(shape + k)
            - special.gammaln(shape)
        )
        return np.asarray(out, dtype=np.float64)

    def _quiet_log_marginal_groups(
        self, shape: FloatArray, rate: FloatArray, codes: IntArray
    ) -> FloatArray:
        """``_quiet_log_marginal(shape[codes], rate[codes])`` with ``log b`` and
        ``log Gamma(a)`` taken once a group, not once a page: the same numbers (each is the
        same function of the same value; ``a + 0`` is ``a``, so a page without a trusted age
        reads its ``log Gamma(a + K)`` from its group too)."""
        k = self.aged
        a, b = shape[codes], rate[codes]
        log_gamma = special.gammaln(shape)[codes]
        log_gamma_k = log_gamma.copy()
        aged = np.flatnonzero(k != 0)
        if aged.shape[0]:
            log_gamma_k[aged] = special.gammaln(a[aged] + k[aged])
        out = a * np.log(rate)[codes] - (a + k) * np.log(b + self.exposure) + log_gamma_k
        out -= log_gamma
        return np.asarray(out, dtype=np.float64)

    def log_marginal(self, shape: FloatArray, rate: FloatArray) -> FloatArray:
        """Per page: log of the observations' likelihood integrated over Gamma(shape, rate)."""
        out = self._quiet_log_marginal(shape, rate)
        if self.n_busy:
            busy = ~self.quiet
            a, b = shape[busy], rate[busy]
            top, weights = self.busy_weights
            which, factors, offset = grid_kernels._gamma_factors(a, b, _GRID)
            norm = grid_kernels.gamma_normalization(a, b, _STEP)
            out[busy] = (
                grid_kernels._gamma_log_marginal(
                    weights, top, which, factors, offset, a, b, _GRID, self.busy_rows_loglik
                )
                + norm
            )
        return out

    def log_marginal_rows(self, rows: grid_kernels.GammaRows, codes: IntArray) -> FloatArray:
        """``log_marginal`` with each page's Gamma the row ``codes`` of ``rows`` (its group's):
        the same numbers, the factors built once per prior instead of once per call."""
        return self.log_marginal_of(rows.shape, rows.rate, codes, rows, codes[~self.quiet])

    def log_marginal_of(
        self,
        shape: FloatArray,
        rate: FloatArray,
        codes: IntArray,
        rows: grid_kernels.GammaRows,
        busy_rows: IntArray,
    ) -> FloatArray:
        """``log_marginal(shape[codes], rate[codes])`` (per group: ``shape``, ``rate``; per
        page: its group ``codes``) with each busy page's Gamma given as its row
        ``busy_rows`` of ``rows``."""
        out = self._quiet_log_marginal_groups(shape, rate, codes)
        if self.n_busy:
            busy = ~self.quiet
            top, weights = self.busy_weights
            norm = grid_kernels.gamma_normalization(shape, rate, _STEP)
            out[busy] = (
                grid_kernels.gamma_rows_log_marginal(
                    weights, top, rows, busy_rows, _GRID, self.busy_rows_loglik
                )
                + norm[codes[busy]]
            )
        return out

    def posterior(
        self,
        rows: grid_kernels.GammaRows,
        codes: IntArray,
        level_prior: FloatArray,
        interval: FloatArray | None = None,
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, grid_kernels.GridPosterior]:
        """``log_marginal_rows`` and ``histogram_posterior(level_prior)`` of every page (one
        pass over the busy pages' weights: ``grid_kernels.grid_posterior``), and that pass's
        result for the busy pages, with their fresh shares at ``interval`` (per busy page,
        its mean observed interval) under both components if given."""
        log_group = self._quiet_log_marginal_groups(rows.shape, rows.rate, codes)
        n = self.quiet.shape[0]
        log_odd, mean, sd = np.empty(n), np.empty(n), np.empty(n)
        busy = ~self.quiet
        top, weights = self.busy_weights
        post = grid_kernels.grid_posterior(
            weights, top, self.busy_rows_loglik, rows, codes[busy], level_prior, _GRID, interval
        )
        if self.n_busy:
            norm = grid_kernels.gamma_normalization(rows.shape, rows.rate, _STEP)
            log_group[busy] = post.log_gamma + norm[codes[busy]]
            log_odd[busy], mean[busy], sd[busy] = post.log_odd, post.mean_log, post.sd_log
        grid_kernels.quiet_pages_histogram(
            self.quiet, self.aged, self.exposure, level_prior, _GRID, (log_odd, mean, sd)
        )
        return log_group, log_odd, mean, sd, post

    def calm_fresh_shares(
        self,
        calm: IntArray,
        rows: grid_kernels.GammaRows,
        codes: IntArray,
        level_prior: FloatArray,
        odd: FloatArray,
        interval: FloatArray,
    ) -> FloatArray:
        """The mixture posterior's mean fresh share (``grid_kernels.posterior_fresh_share``,
        within 5.3e-10) at ``interval`` (days) of the quiet pages ``calm``; ``codes``,
        ``odd``, ``interval``: per page of the grid (its group, odd probability, mean
        observed interval). Their likelihoods' weights are made block by block. Without
        a trusted age among them, in float32 (``grid_kernels.quiet_fresh_share``: 1 - the
        share within 2.5e-5 relative, so the rate planned within 1.69 times that)."""

        if not self.aged[calm].any():  # no age: -E r, summed in float32
            return grid_kernels.quiet_fresh_share(
                self.exposure[calm],
                rows,
                codes[calm],
                level_prior,
                odd[calm],
                interval[calm],
                _GRID,
            )

        def loglik_of(at: IntArray) -> FloatArray:
            pages = calm[at]
            out = self.aged[pages, None] * _GRID[None, :]
            out -= self.exposure[pages, None] * _RATE
            return out

        return grid_kernels.fresh_share_from_loglik(
            loglik_of, rows, codes[calm], level_prior, odd[calm], interval[calm], _GRID
        )

    def histogram_posterior(self, prior: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per page under a grid prior: log marginal likelihood, mean and sd of log rate."""
        return grid_kernels.page_histogram(
            self.quiet, self.aged, self.exposure, self.busy_weights, prior, _GRID
        )


def _in_blocks(size: int, block: Callable[[int, int], None]) -> None:
    """Run ``block(lo, hi)`` over ``range(size)`` in chunks, on a thread per core."""

    def run(lo: int) -> None:
        block(lo, min(lo + _CHUNK, size))

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(run, range(0, size, _CHUNK)))
