"""The mixture prior's fast grid kernels against the direct sums they replace.

``ReferenceGrid`` is ``_PageGrid`` as it was before the kernels (one expm1 and log per node
and grid point, one exp per marginal): the estimates under both must agree within the bound
the table's interpolation error implies.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

import models.estimation.mixture_prior as mp
from models.estimation import grid_kernels
from models.estimation.rate_data import IntervalStats, PageMoments
from models.estimation.synthetic import generate_history, generate_web

GRID, RATE, STEP = mp._GRID, mp._RATE, mp._STEP


class ReferenceGrid(mp._PageGrid):
    """The direct computation (the implementation before ``grid_kernels``)."""

    @classmethod
    def build(cls, stats: IntervalStats) -> ReferenceGrid:
        aged, aged_days = stats.ages()
        exposure = stats.unchanged_days + aged_days
        quiet = stats.n_changed == 0
        busy = np.flatnonzero(~quiet)
        loglik = np.zeros((busy.shape[0], GRID.shape[0]))
        if busy.shape[0]:
            position = np.full(stats.size, -1)
            position[busy] = np.arange(busy.shape[0])
            rows = position[stats.node_page]
            contrib = stats.node_weight[:, None] * np.log(
                -np.expm1(-stats.node_days[:, None] * RATE[None, :])
            )
            starts = np.flatnonzero(np.r_[True, np.diff(rows) != 0])
            loglik[rows[starts]] += np.add.reduceat(contrib, starts, axis=0)
            loglik -= exposure[busy, None] * RATE[None, :]
            loglik += aged[busy, None] * GRID[None, :]
        return cls(quiet, exposure, aged, loglik)

    def log_marginal(self, shape: np.ndarray, rate: np.ndarray) -> np.ndarray:
        k = self.aged
        out = (
            shape * np.log(rate)
            - (shape + k) * np.log(rate + self.exposure)
            + special.gammaln(shape + k)
            - special.gammaln(shape)
        )
        if self.busy_loglik.shape[0]:
            busy = ~self.quiet
            a, b = shape[busy], rate[busy]
            log_post = self.busy_loglik + a[:, None] * GRID - b[:, None] * RATE
            top = log_post.max(axis=1)
            total = np.exp(log_post - top[:, None]).sum(axis=1)
            norm = a * np.log(b) - special.gammaln(a) + np.log(STEP)
            out[busy] = np.log(total) + top + norm
        return np.asarray(out)

    def histogram_posterior(self, prior: np.ndarray) -> tuple[np.ndarray, ...]:
        log_post = self.loglik() + np.log(prior)[None, :]
        top = log_post.max(axis=1, keepdims=True)
        weight = np.exp(log_post - top)
        total = weight.sum(axis=1)
        mean = (weight @ GRID) / total
        var = (weight @ (GRID**2)) / total - mean**2
        return np.log(total) + top[:, 0], mean, np.sqrt(np.maximum(var, 0.0))


def test_changed_loglik_within_its_bound() -> None:
    rng = np.random.default_rng(3)
    n_rows = 500
    rows = rng.integers(0, n_rows, 2_000)  # unsorted, up to ~10 nodes a row
    days = np.exp(rng.uniform(np.log(1e-4), np.log(3e3), rows.shape[0]))
    weight = rng.uniform(0.0, 40.0, rows.shape[0])
    got = grid_kernels.changed_loglik(rows, days, weight, n_rows, GRID)
    want = np.zeros((n_rows, GRID.shape[0]))
    np.add.at(want, rows, weight[:, None] * np.log(-np.expm1(-days[:, None] * RATE)))
    bound = grid_kernels.changed_loglik_error(GRID) * np.bincount(rows, weight, n_rows)
    assert grid_kernels.changed_loglik_error(GRID) < 1.5e-9
    assert (np.abs(got - want) <= bound[:, None] + 1e-12 * np.abs(want)).all()
    # the bound is not vacuous: a coarse table would miss it (interpolation error ~1e-3)
    assert np.abs(got - want).max() > 0.0


def test_gamma_marginal_and_histogram_match_direct_sums() -> None:
    rng = np.random.default_rng(4)
    n = 3_000
    loglik = rng.normal(0, 3, (n, GRID.shape[0])).cumsum(axis=1) / 5 - 0.5 * RATE
    groups = rng.integers(0, 40, n)
    shape = rng.uniform(0.1, 20, 40)[groups]
    rate = np.exp(rng.uniform(-3, 12, 40))[groups]
    # a few pages far from their prior: the scaled sums underflow, summed directly
    rate[:5] = 1e7
    loglik[:5] = 60 * GRID
    top, weights = grid_kernels.grid_weights(loglik)
    got = grid_kernels.gamma_log_marginal(weights, top, shape, rate, GRID, loglik)
    log_post = loglik + shape[:, None] * GRID - rate[:, None] * RATE
    peak = log_post.max(axis=1)
    want = np.log(np.exp(log_post - peak[:, None]).sum(axis=1)) + peak
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)

    prior = rng.dirichlet(np.ones(GRID.shape[0]))
    log_z, mean, _ = grid_kernels.histogram_moments(weights, top, prior, GRID)
    lp = loglik + np.log(prior)
    t = lp.max(axis=1, keepdims=True)
    w = np.exp(lp - t)
    np.testing.assert_allclose(log_z, np.log(w.sum(1)) + t[:, 0], rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(mean, (w @ GRID) / w.sum(1), rtol=1e-12, atol=1e-11)


@pytest.mark.parametrize("seed", [0, 1])
def test_quiet_table_matches_direct_sums(seed: int) -> None:
    rng = np.random.default_rng(seed)
    prior = 0.98 * rng.dirichlet(np.full(GRID.shape[0], 0.3)) + 0.02 / GRID.shape[0]
    # inside the table's range and beyond both of its ends
    exposure = np.exp(rng.uniform(-14, 20, 4_000))
    log_z, mean, sd = grid_kernels.quiet_histogram(exposure, prior, GRID)
    loglik = -exposure[:, None] * RATE
    top, weights = grid_kernels.grid_weights(loglik)
    want = grid_kernels.histogram_moments(weights, top, prior, GRID)
    np.testing.assert_allclose(log_z, want[0], rtol=0, atol=1e-10)
    np.testing.assert_allclose(mean, want[1], rtol=0, atol=1e-10)
    # sd = sqrt(<g^2> - <g>^2): an error e in the moments is e / (2 sd) in sd, which is
    # ~1e-5 where the whole posterior sits on the grid's first point (huge exposures)
    np.testing.assert_allclose(sd, want[2], rtol=0, atol=1e-8)


def _moments(n_pages: int) -> tuple[PageMoments, np.ndarray]:
    web = generate_web(n_pages, n_hosts=60, seed=5)
    order = np.argsort(web.url_ids)
    index = np.empty(n_pages, dtype=np.int64)
    index[order] = np.arange(n_pages)
    sums = np.zeros((6, n_pages))
    for _, table in generate_history(web, 8, failure_rate=0.0, seed=5):
        days = table["interval_days"].to_numpy(zero_copy_only=False)
        ok = ~np.isnan(days)
        page = index[np.searchsorted(web.url_ids[order], table["url_id"].to_numpy()[ok])]
        changed = table["changed"].to_numpy(zero_copy_only=False)[ok].astype(bool)
        t = np.where(changed, days[ok], 0.0)
        for row, values in enumerate(
            (np.ones_like(t), changed, np.where(changed, 0.0, days[ok]), t, t * t, t**3)
        ):
            np.add.at(sums[row], page, values)
    moments = PageMoments.checked(
        web.url_ids[order], sums[0].astype(np.int64), sums[1].astype(np.int64), *sums[2:]
    )
    return moments, web.host_index[order]


def test_mixture_estimates_match_the_direct_implementation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moments, hosts = _moments(6_000)
    new, new_prior = mp.estimate_with_mixture_prior(moments, hosts)
    with monkeypatch.context() as patch:
        patch.setattr(mp, "_PageGrid", ReferenceGrid)
        old, old_prior = mp.estimate_with_mixture_prior(moments, hosts)
    # Each page's grid log-likelihood is off by at most 1.4e-9 per changed interval (<= 8
    # here): ~1e-8 on every log marginal, so on the odd probabilities, the group levels
    # (pooled with them) and the odd pages' posterior means. 1e-6 relative on the rates
    # leaves two orders of magnitude for the fit's optimizer, which sees the same shift.
    assert grid_kernels.changed_loglik_error(GRID) * moments.n_changed.max() < 2e-8
    np.testing.assert_allclose(new.rate, old.rate, rtol=1e-6)
    np.testing.assert_allclose(new.log_std, old.log_std, rtol=1e-6)
    assert new_prior.shape == pytest.approx(old_prior.shape, rel=1e-6)
    assert new_prior.odd_share == pytest.approx(old_prior.odd_share, rel=1e-6)
