"""The robust group prior: recovers group levels, spots odd pages, beats a flat prior."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from models.estimation import grid_kernels, mixture_prior
from models.estimation.change_rate import estimate_from_moments
from models.estimation.mixture_prior import (
    _inverse_trigamma,
    fit_mixture_prior,
    group_gamma_parameters,
)
from models.estimation.rate_data import PageMoments

LEVELS = np.array([0.002, 0.1, 5.0])


def grouped_web(seed: int = 0, groups: int = 150, per_group: int = 40, visits: int = 6):
    """Pages in groups sharing a level (lognormal spread 0.3), 10% odd pages, regular visits."""
    rng = np.random.default_rng(seed)
    group_level = LEVELS[rng.integers(0, 3, groups)]
    group = np.repeat(np.arange(groups), per_group)
    n = group.shape[0]
    rate = group_level[group] * np.exp(rng.normal(0, 0.3, n))
    odd = rng.random(n) < 0.1
    rate[odd] = LEVELS[rng.integers(0, 3, int(odd.sum()))]
    interval = 4.0
    changed = rng.random((n, visits)) < -np.expm1(-rate[:, None] * interval)
    x = changed.sum(axis=1)
    moments = PageMoments.checked(
        np.arange(n),
        np.full(n, visits),
        x,
        (visits - x) * interval,
        x * interval,
        x * interval**2,
        x * interval**3,
    )
    return moments, group, rate, group_level, odd


def test_group_levels_and_odd_pages_are_recovered():
    moments, group, rate, level, odd = grouped_web()
    prior = fit_mixture_prior(moments, group)
    centre = np.exp(prior.group_log_rate)
    fast = level >= 1.0  # a daily-or-faster level is only bounded below by 4-day visits
    assert np.median(np.abs(np.log(centre[~fast] / level[~fast]))) < 0.5
    assert np.all(centre[fast] > 1.0)
    assert 0.03 < prior.odd_share < 0.3
    _, _, p_odd = prior.estimate(moments, group)
    # odd pages whose class differs from their group's are flagged far more often
    differs = odd & (np.abs(np.log(rate / level[group])) > 2)
    assert p_odd[differs].mean() > 0.5 > 5 * p_odd[~odd].mean()


def test_group_levels_pool_every_page_even_when_the_fit_samples_a_few():
    # 40 pages a group, the fit sampling 3 of them (as 50,000 pages over 15,000 groups do)
    moments, group, _, level, _ = grouped_web(seed=2, groups=60, visits=6)
    full = fit_mixture_prior(moments, group)
    few = fit_mixture_prior(moments, group, per_group=3)
    slow = level < 1.0
    # levels as narrow and as close to the truth as when every page is in the sample
    assert np.median(few.group_log_var[slow]) < 1.5 * np.median(full.group_log_var[slow])
    error = np.abs(few.group_log_rate[slow] - np.log(level[slow]))
    assert np.median(error) < 0.4


def test_the_mixture_prior_estimates_better_than_the_flat_library_prior():
    moments, group, rate, _, _ = grouped_web(seed=1)
    prior = fit_mixture_prior(moments, group)
    mixture, _, _ = prior.estimate(moments, group)
    library = estimate_from_moments(moments, groups=group).rate
    slow = rate < 1.0  # above a change a day, 4-day visits cannot tell rates apart

    def error(est: np.ndarray) -> float:
        return float(np.median(np.abs(np.log(est[slow] / rate[slow]))))

    assert error(mixture) < 0.7 * error(library)


def test_an_uncertain_group_level_weakens_the_prior_and_keeps_its_centre():
    shape, centre = 4.0, np.log(np.array([0.1, 0.1]))
    a, b = group_gamma_parameters(shape, centre, np.array([0.0, 4.0]))
    assert a[0] == pytest.approx(shape, rel=1e-4)
    assert a[1] < 0.3 * shape
    # the mean of log(rate) stays where the known level would put it
    mean_log = special.digamma(a) - np.log(b)
    assert mean_log[1] == pytest.approx(mean_log[0], abs=1e-4)


def test_inverse_trigamma():
    x = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 50))
    # Linear interpolation of log x in log trigamma leaves at most h^2 / 8 max|g''| in
    # log x per cell (g'' from the table's own second divided differences); 2x for g''
    # varying within a cell.
    g, v = -mixture_prior._TRIGAMMA_LOG, mixture_prior._TRIGAMMA_X
    slopes = np.diff(v) / np.diff(g)
    curvature = np.abs(np.diff(slopes)) / (0.5 * (g[2:] - g[:-2]))
    bound = 2 * float(np.max(np.diff(g)) ** 2 / 8 * curvature.max())
    assert bound < 1e-5
    assert _inverse_trigamma(special.polygamma(1, x)) == pytest.approx(x, rel=bound)


def test_no_observation_gives_a_vague_prior():
    n = 10
    zeros = np.zeros(n, dtype=np.int64)
    moments = PageMoments(np.arange(n), zeros, zeros, *(np.zeros(n) for _ in range(4)))
    prior = fit_mixture_prior(moments, np.zeros(n, dtype=np.int64))
    rate, log_std, odd = prior.estimate(moments, np.zeros(n, dtype=np.int64))
    assert np.all(np.isfinite(rate)) and np.all(log_std > 1.0) and np.all(odd == 0)


def test_the_planners_estimator_is_the_mixture_prior():
    """``estimate_from_moments(prior="mixture")`` (the planner's default) is this prior."""
    moments, group, rate, _, _ = grouped_web(seed=2)
    mixture = estimate_from_moments(moments, groups=group, prior="mixture")
    direct, _, _ = fit_mixture_prior(moments, group).estimate(moments, group)
    np.testing.assert_allclose(mixture.rate, direct)
    assert (mixture.rate_low < mixture.rate).all() and (mixture.rate < mixture.rate_high).all()
    assert np.isfinite(mixture.prior_rate).all()
    empirical = estimate_from_moments(moments, groups=group, prior="empirical")

    def error(est: np.ndarray) -> float:
        return float(np.median(np.abs(np.log(est / rate))))

    assert error(mixture.rate) < error(empirical.rate)


def test_the_mixture_prior_needs_moment_sums():
    from models.estimation.change_rate import EstimationInputError, estimate_rates

    with pytest.raises(EstimationInputError, match="mixture prior needs per-page moment sums"):
        estimate_rates([0, 0], [1.0, 2.0], [True, False], prior="mixture")


def _gamma_posterior_freshness(
    shape: float, rate: float, changed_days: float, unchanged_days: float, interval: float
) -> tuple[float, float, float]:
    """By quadrature, independently of the grid: for one page with a changed interval of
    ``changed_days`` and ``unchanged_days`` unchanged under a Gamma(shape, rate) prior, the
    posterior-expected fresh share at ``interval``, the posterior mean and harmonic mean."""
    from scipy import integrate

    def weight(r: float) -> float:
        likelihood = -np.expm1(-r * changed_days) * np.exp(-r * unchanged_days)
        return float(likelihood * r ** (shape - 1) * np.exp(-rate * r))

    def fresh(r: float) -> float:
        return float(-np.expm1(-r * interval) / (r * interval))

    top = 50.0 * shape / rate
    norm = integrate.quad(weight, 0, top, limit=200)[0]
    share = integrate.quad(lambda r: weight(r) * fresh(r), 0, top, limit=200)[0] / norm
    mean = integrate.quad(lambda r: weight(r) * r, 0, top, limit=200)[0] / norm
    inverse = integrate.quad(lambda r: weight(r) / r, 0, top, limit=200)[0] / norm
    return share, mean, 1.0 / inverse


@pytest.mark.parametrize(
    ("shape", "rate", "changed_days", "unchanged_days", "interval"),
    [(1.0, 0.5, 30.0, 0.0, 30.0), (2.0, 20.0, 5.0, 40.0, 15.0), (0.7, 0.2, 10.0, 0.0, 10.0)],
)
def test_the_freshness_equivalent_rate_matches_quadrature(
    shape: float, rate: float, changed_days: float, unchanged_days: float, interval: float
) -> None:
    """The rate a page is planned at keeps it as fresh at its interval as its posterior
    expects (what a visit buys is (1 - e^(-rI)) / (rI), convex in r: the posterior's spread
    matters, not only its centre).

    Tolerance: the grid integrates a density smooth in log r with step h = 0.16; the
    posteriors here have a log-rate sd of at least 0.5, and the trapezoid rule's relative
    error on such an integrand is of order exp(-2 pi^2 sd^2 / h^2) (far below 1e-6); their
    mass beyond the grid's ends (1e-5, 100 a day) is below 1e-6; the inverse of the fresh
    share is a linear interpolation on steps of 0.008 in log x (relative error under 1e-5).
    So 1e-3 relative bounds what the grid may add to the exact answer.
    """
    grid = mixture_prior._GRID
    r = np.exp(grid)
    loglik = np.log(-np.expm1(-r * changed_days)) - r * unchanged_days
    level_prior, odd, at = np.full(97, 1 / 97), np.zeros(1), np.array([interval])
    # the reference kernel (exp pass of its own, distinct Gammas found per call) ...
    direct = grid_kernels.posterior_fresh_share(
        loglik[None, :], np.array([shape]), np.array([rate]), level_prior, odd, at, grid
    )
    # ... and the path the estimate takes (a prior's Gamma rows, the marginals' weights)
    _, weights = grid_kernels.grid_weights(loglik[None, :])
    rows = grid_kernels.GammaRows.of(np.array([shape]), np.array([rate]), grid)
    kept = grid_kernels.fresh_share_from_weights(
        weights,
        lambda which: loglik[None, :][which],
        rows,
        np.zeros(1, dtype=np.int64),
        level_prior,
        odd,
        at,
        grid,
    )
    share, mean, harmonic = _gamma_posterior_freshness(
        shape, rate, changed_days, unchanged_days, interval
    )
    expected = mixture_prior._inverse_fresh_share(np.array([share]))[0] / interval
    got = mixture_prior._inverse_fresh_share(direct)[0] / interval
    assert got == pytest.approx(expected, rel=1e-3)
    # the same arithmetic on the same weights: equal to rounding (1e-12 relative)
    assert kept[0] == pytest.approx(direct[0], rel=1e-12)
    # Jensen: the fresh share is convex in r and concave in 1/r, so the equivalent rate
    # lies between the harmonic and the arithmetic mean of the posterior
    assert harmonic * (1 - 1e-3) <= got <= mean * (1 + 1e-3)


def test_a_fast_group_seen_only_at_long_intervals_is_planned_at_a_rate_it_may_have():
    """Pages that changed at every 30-day interval may change daily or hourly: the
    likelihood is flat above a few changes a month. Planned at the posterior's centre
    (the geometric mean, spread up to the grid's 100 a day) such a host looked several
    times faster than its pages and was given up (issue 18: a host at ~1 a day estimated at
    7); planned at the freshness-equivalent rate it is at most the posterior's geometric
    mean, and a revisit at its interval is worth what the posterior expects."""
    n_fast, n_slow = 200, 200
    n = n_fast + n_slow
    group = np.r_[np.zeros(n_fast), np.ones(n_slow)].astype(np.int64)
    changed = np.r_[np.ones(n_fast), np.zeros(n_slow)].astype(np.int64)
    t = 30.0
    moments = PageMoments.checked(
        np.arange(n),
        np.ones(n, dtype=np.int64),
        changed,
        (1 - changed) * t,
        changed * t,
        changed * t**2,
        changed * t**3,
    )
    prior = fit_mixture_prior(moments, group)
    rate, _, _ = prior.estimate(moments, group)
    saved = mixture_prior.CERTAINTY_EQUIVALENT
    try:
        mixture_prior.CERTAINTY_EQUIVALENT = False
        centre, _, _ = prior.estimate(moments, group)
    finally:
        mixture_prior.CERTAINTY_EQUIVALENT = saved
    fast = group == 0
    # a changed 30-day interval says r > ~1/30: the equivalent rate stays well below the
    # centre of a posterior spread evenly (in log) from there to 100 a day
    assert np.all(rate[fast] < 0.5 * centre[fast])
    assert np.all(rate[fast] > 1 / 30)


@pytest.mark.parametrize("with_ages", [False, True])
def test_group_levels_of_groups_without_pages_are_the_level_prior(with_ages: bool) -> None:
    """Groups with nothing pooled (no page, or pages weighted 0) are skipped when the
    likelihood is built (it is 1 on the grid): they take the level distribution's own
    mean and variance, and the groups with pages get the same numbers as without them."""
    moments, group, _, _, _ = grouped_web(seed=4, groups=40, per_group=10)
    part = mixture_prior._level_data(moments, slice(None), None)
    if with_ages:
        rng = np.random.default_rng(4)
        count = rng.integers(0, 3, moments.size).astype(np.float64)
        part = mixture_prior.DecayedMoments(
            *part.arrays(), aged_count=count, aged_days=count * rng.uniform(1.0, 9.0, count.size)
        )
    weight = np.where(group == 7, 0.0, 0.9)  # group 7's pages weigh nothing
    flat = np.full(mixture_prior._GRID.shape[0], 1.0 / mixture_prior._GRID.shape[0])
    # 25 groups without a page between and after the others (codes 40..64 unused by pages)
    spread_codes = np.where(group < 20, group, group + 25)
    mean, var, prior = mixture_prior._group_levels(part, spread_codes, weight, 65, flat)
    alone = mixture_prior._group_levels(part, group, weight, 40, flat)
    with_pages = np.r_[0:7, 8:20, 45:65]
    np.testing.assert_array_equal(mean[with_pages], np.delete(alone[0], 7))
    np.testing.assert_array_equal(var[with_pages], np.delete(alone[1], 7))
    np.testing.assert_array_equal(prior, alone[2])
    post = prior / prior.sum()
    centre = float(post @ mixture_prior._GRID)
    empty = np.r_[7, 20:45]
    np.testing.assert_allclose(mean[empty], centre, rtol=0, atol=1e-12)
    want_var = float(post @ mixture_prior._GRID**2) - centre**2
    np.testing.assert_allclose(var[empty], want_var, rtol=1e-12)
    assert np.isfinite(mean).all() and np.isfinite(var).all()
