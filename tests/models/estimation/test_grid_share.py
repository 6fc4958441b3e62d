"""``grid_kernels.posterior_fresh_share`` against the direct sums it replaces.

The direct computation normalizes both posteriors on the grid with an exp per component
and evaluates ``s(x) = (1 - exp(-x)) / x`` with an expm1 per grid point; the kernel shares
one exp and reads ``s`` from a table. The share is a convex combination of ``s`` values, so
the two agree within the table's interpolation bound (``fresh_share_error``) plus rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from models.estimation import grid_kernels

GRID = np.linspace(np.log(1e-5), np.log(100.0), 97)
RATE = np.exp(GRID)
ROUNDING = 1e-12  # sums of 97 terms in [0, 1], normalized: far below this


def direct_posterior(
    loglik: np.ndarray, shape: np.ndarray, rate: np.ndarray, prior: np.ndarray, odd: np.ndarray
) -> np.ndarray:
    """Each row's posterior on the grid under the mixture prior, by the direct sums."""
    log_reg = loglik + shape[:, None] * GRID - rate[:, None] * RATE
    with np.errstate(divide="ignore"):
        log_odd = loglik + np.log(prior)[None, :]
    post_reg = np.exp(log_reg - log_reg.max(axis=1, keepdims=True))
    post_reg /= post_reg.sum(axis=1, keepdims=True)
    post_odd = np.exp(log_odd - log_odd.max(axis=1, keepdims=True))
    post_odd /= post_odd.sum(axis=1, keepdims=True)
    return np.asarray((1 - odd)[:, None] * post_reg + odd[:, None] * post_odd)


def direct_share(
    loglik: np.ndarray,
    shape: np.ndarray,
    rate: np.ndarray,
    prior: np.ndarray,
    odd: np.ndarray,
    interval: np.ndarray,
) -> np.ndarray:
    post = direct_posterior(loglik, shape, rate, prior, odd)
    x = interval[:, None] * RATE[None, :]
    return np.asarray((post * (-np.expm1(-x) / x)).sum(axis=1))


def pages(n: int, seed: int) -> tuple[np.ndarray, ...]:
    """Log-likelihoods of pages seen ``n_int`` times at ``interval`` days, some changed."""
    rng = np.random.default_rng(seed)
    interval = np.exp(rng.uniform(np.log(0.05), np.log(60.0), n))
    n_int = rng.integers(1, 30, n)
    changed = rng.binomial(n_int, rng.uniform(0, 1, n))
    # changed intervals: log(1 - exp(-t r)) each; unchanged: -t r each
    loglik = changed[:, None] * np.log(-np.expm1(-interval[:, None] * RATE))
    loglik -= ((n_int - changed) * interval)[:, None] * RATE
    groups = rng.integers(0, 40, n)  # pages of a group share their Gamma
    shape = rng.uniform(0.1, 8.0, 40)[groups]
    rate = np.exp(rng.uniform(-3, 6, 40))[groups]
    prior = rng.random(97) + 0.02
    prior /= prior.sum()
    return loglik, shape, rate, prior, rng.uniform(0, 1, n), interval


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_share_matches_the_direct_sums_within_the_table_bound(seed: int) -> None:
    loglik, shape, rate, prior, odd, interval = pages(3000, seed)
    got = grid_kernels.posterior_fresh_share(loglik, shape, rate, prior, odd, interval, GRID)
    want = direct_share(loglik, shape, rate, prior, odd, interval)
    bound = grid_kernels.fresh_share_error(GRID) + ROUNDING
    assert np.max(np.abs(got - want)) <= bound
    # the bound is tight enough to mean something: a share error of 1e-6 would fail it
    assert bound < 1e-9


def test_each_component_is_weighted_by_its_own_probability() -> None:
    loglik, shape, rate, prior, _, interval = pages(500, 3)
    bound = grid_kernels.fresh_share_error(GRID) + ROUNDING
    for p in (0.0, 1.0):
        odd = np.full(500, p)
        got = grid_kernels.posterior_fresh_share(loglik, shape, rate, prior, odd, interval, GRID)
        assert np.max(np.abs(got - direct_share(loglik, shape, rate, prior, odd, interval))) <= (
            bound
        )
    # the two components differ here, so swapping the weights would be caught
    group = grid_kernels.posterior_fresh_share(
        loglik, shape, rate, prior, np.zeros(500), interval, GRID
    )
    odd_only = grid_kernels.posterior_fresh_share(
        loglik, shape, rate, prior, np.ones(500), interval, GRID
    )
    assert np.max(np.abs(group - odd_only)) > 1e-3


def test_a_prior_far_from_the_likelihood_is_summed_directly() -> None:
    # a page that changed at every one of 200 daily visits under a group prior of one change
    # a decade with a huge shape: the scaled Gamma sum underflows (> 700 nats apart)
    loglik = 200 * np.log(-np.expm1(-RATE))[None, :]
    shape, rate = np.array([5000.0]), np.array([5000.0 / 3e-4])
    prior = np.full(97, 1 / 97)
    odd, interval = np.array([0.0]), np.array([1.0])
    got = grid_kernels.posterior_fresh_share(loglik, shape, rate, prior, odd, interval, GRID)
    want = direct_share(loglik, shape, rate, prior, odd, interval)
    assert np.isfinite(got).all()
    assert abs(got[0] - want[0]) <= grid_kernels.fresh_share_error(GRID) + ROUNDING


def direct_deficit(
    exposure: np.ndarray,
    shape: np.ndarray,
    rate: np.ndarray,
    prior: np.ndarray,
    odd: np.ndarray,
    interval: np.ndarray,
) -> np.ndarray:
    """``1 - direct_share`` for likelihoods ``-E r``, with ``1 - s(x)`` summed as itself
    (``(x + expm1(-x)) / x``, its series below 1e-3) so that a small deficit keeps its
    relative precision."""
    loglik = -exposure[:, None] * RATE
    post = direct_posterior(loglik, shape, rate, prior, odd)
    x = interval[:, None] * RATE[None, :]
    series = x * (0.5 - x * (1 / 6 - x * (1 / 24 - x / 120)))
    u = np.where(x < 1e-3, series, (x + np.expm1(-x)) / x)
    return np.asarray((post * u).sum(axis=1))


@pytest.mark.parametrize("seed", [0, 1])
def test_quiet_share_in_float32_within_its_bound(seed: int) -> None:
    """Quiet pages' shares summed in float32: ``1 - share`` within
    ``quiet_fresh_share_error`` (relative) of the direct sums; the rows the float32 sums
    cannot hold (a deficit above 0.5, a Gamma sum near underflow) are summed in float64,
    within the float64 kernel's bound."""
    rng = np.random.default_rng(seed)
    n = 3_000
    exposure = np.exp(rng.uniform(np.log(0.05), np.log(3e3), n))
    interval = exposure / rng.integers(1, 30, n)
    groups = rng.integers(0, 40, n)
    shape, rate = rng.uniform(0.05, 8.0, 40), np.exp(rng.uniform(-3, 8, 40))
    shape[0], rate[0] = 200.0, 2.0  # a fast group with a huge shape: its sums underflow
    shape[1], rate[1] = 30.0, 0.5  # fast: deficits above 0.5 at long intervals
    exposure[groups == 0] *= 10.0
    rows = grid_kernels.GammaRows.of(shape, rate, GRID)
    prior = 0.98 * rng.dirichlet(np.full(97, 0.3)) + 0.02 / 97
    odd = rng.uniform(0, 1, n)
    got = 1.0 - grid_kernels.quiet_fresh_share(exposure, rows, groups, prior, odd, interval, GRID)
    want = direct_deficit(exposure, shape[groups], rate[groups], prior, odd, interval)
    bound = grid_kernels.quiet_fresh_share_error(GRID)
    f32_rows = (want < 0.45) & (groups != 0)
    assert f32_rows.sum() > 2_000 and (want > 0.55).sum() >= 5
    err = np.abs(got - want)
    assert (err[f32_rows] <= bound * want[f32_rows]).all()
    assert (err <= bound * want + grid_kernels.fresh_share_error(GRID) + ROUNDING).all()
    # the bound is tight enough to mean something, and the sums really are float32
    assert bound < 3e-5
    assert (err[f32_rows] / want[f32_rows]).max() > 1e-9
