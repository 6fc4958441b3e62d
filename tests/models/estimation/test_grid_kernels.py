"""The mixture prior's fast grid kernels against the direct sums they replace.

``ReferenceGrid`` is ``_PageGrid`` as it was before the kernels (one expm1 and log per node
and grid point, one exp per marginal): the estimates under both must agree within the bound
the table's interpolation error implies.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import special

import models.estimation.mixture_prior as mp
from models.estimation import grid_kernels
from models.estimation.rate_data import IntervalStats, PageMoments
from models.estimation.synthetic import generate_history, generate_web

GRID, RATE, STEP = mp._GRID, mp._RATE, mp._STEP


def _reference_busy_loglik(stats: IntervalStats, busy: np.ndarray) -> np.ndarray:
    """The busy pages' log-likelihoods, one expm1 and log per node and grid point."""
    aged, aged_days = stats.ages()
    exposure = stats.unchanged_days + aged_days
    loglik = np.zeros((busy.shape[0], GRID.shape[0]))
    if busy.shape[0]:
        position = np.full(stats.size, -1)
        position[busy] = np.arange(busy.shape[0])
        rows = position[stats.node_page]
        keep = rows >= 0
        contrib = stats.node_weight[keep, None] * np.log(
            -np.expm1(-stats.node_days[keep, None] * RATE[None, :])
        )
        rows = rows[keep]
        starts = np.flatnonzero(np.r_[True, np.diff(rows) != 0])
        loglik[rows[starts]] += np.add.reduceat(contrib, starts, axis=0)
        loglik -= exposure[busy, None] * RATE[None, :]
        loglik += aged[busy, None] * GRID[None, :]
    return loglik


def _direct_share(x: np.ndarray) -> np.ndarray:
    return np.where(x > 1e-12, -np.expm1(-x) / np.maximum(x, 1e-300), 1.0 - 0.5 * x)


class ReferenceGrid(mp._PageGrid):
    """The direct computation (the implementation before ``grid_kernels``)."""

    @classmethod
    def build(cls, stats: IntervalStats) -> mp._PageGrid:
        return cls.of(stats, _reference_busy_loglik)

    def log_marginal(self, shape: np.ndarray, rate: np.ndarray) -> np.ndarray:
        k = self.aged
        out = (
            shape * np.log(rate)
            - (shape + k) * np.log(rate + self.exposure)
            + special.gammaln(shape + k)
            - special.gammaln(shape)
        )
        if self.n_busy:
            busy = ~self.quiet
            a, b = shape[busy], rate[busy]
            log_post = self.loglik()[busy] + a[:, None] * GRID - b[:, None] * RATE
            top = log_post.max(axis=1)
            total = np.exp(log_post - top[:, None]).sum(axis=1)
            norm = a * np.log(b) - special.gammaln(a) + np.log(STEP)
            out[busy] = np.log(total) + top + norm
        return np.asarray(out)

    def log_marginal_rows(self, rows: grid_kernels.GammaRows, codes: np.ndarray) -> np.ndarray:
        return self.log_marginal(rows.shape[codes], rows.rate[codes])

    def histogram_posterior(self, prior: np.ndarray) -> tuple[np.ndarray, ...]:
        log_post = self.loglik() + np.log(prior)[None, :]
        top = log_post.max(axis=1, keepdims=True)
        weight = np.exp(log_post - top)
        total = weight.sum(axis=1)
        mean = (weight @ GRID) / total
        var = (weight @ (GRID**2)) / total - mean**2
        return np.log(total) + top[:, 0], mean, np.sqrt(np.maximum(var, 0.0))

    def posterior(
        self,
        rows: grid_kernels.GammaRows,
        codes: np.ndarray,
        level_prior: np.ndarray,
        interval: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, grid_kernels.GridPosterior]:
        log_group = self.log_marginal_rows(rows, codes)
        log_odd, mean, sd = self.histogram_posterior(level_prior)
        busy = ~self.quiet
        gamma_share = odd_share = None
        if interval is not None:
            loglik = self.loglik()[busy]
            a, b = rows.shape[codes[busy]], rows.rate[codes[busy]]
            s = _direct_share(interval[:, None] * RATE)
            post = np.exp(loglik + a[:, None] * GRID - b[:, None] * RATE)
            gamma_share = (post * s).sum(axis=1) / post.sum(axis=1)
            post = np.exp(loglik - loglik.max(axis=1, keepdims=True)) * level_prior
            odd_share = (post * s).sum(axis=1) / post.sum(axis=1)
        kernel = grid_kernels.GridPosterior(
            log_group[busy], log_odd[busy], mean[busy], sd[busy], gamma_share, odd_share
        )
        return log_group, log_odd, mean, sd, kernel


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


def test_one_pass_posterior_matches_the_separate_kernels() -> None:
    """``grid_posterior`` is ``gamma_rows_log_marginal``, ``histogram_moments`` and both
    parts of ``posterior_fresh_share`` in one pass: the same dot products, so the same
    numbers up to rounding (the sums' order may differ: 1e-13 relative)."""
    rng = np.random.default_rng(6)
    n = 3_000
    loglik = rng.normal(0, 3, (n, GRID.shape[0])).cumsum(axis=1) / 5 - 0.5 * RATE
    which = rng.integers(0, 40, n)
    rows = grid_kernels.GammaRows.of(
        rng.uniform(0.1, 20, 40), np.exp(rng.uniform(-3, 12, 40)), GRID
    )
    loglik[:5] = 60 * GRID  # far from their Gamma (rate up to e^12): summed directly
    interval = np.exp(rng.uniform(-3, 5, n))
    prior = rng.dirichlet(np.ones(GRID.shape[0]))
    top, weights = grid_kernels.grid_weights(loglik)
    got = grid_kernels.grid_posterior(
        weights, top, lambda at: loglik[at], rows, which, prior, GRID, interval
    )
    marginal = grid_kernels.gamma_rows_log_marginal(
        weights, top, rows, which, GRID, lambda at: loglik[at]
    )
    assert (~(np.einsum("ij,ij->i", weights, rows.factors[which]) > 1e-280)).sum() >= 1
    np.testing.assert_allclose(got.log_gamma, marginal, rtol=1e-13)
    log_z, mean, sd = grid_kernels.histogram_moments(weights, top, prior, GRID)
    np.testing.assert_allclose(got.log_odd, log_z, rtol=1e-13)
    np.testing.assert_allclose(got.mean_log, mean, rtol=1e-13)
    np.testing.assert_allclose(got.sd_log, sd, rtol=1e-12)
    a, b = rows.shape[which], rows.rate[which]
    assert got.gamma_share is not None and got.odd_share is not None
    for p_odd, part in ((0.0, got.gamma_share), (1.0, got.odd_share)):
        want = grid_kernels.posterior_fresh_share(
            loglik, a, b, prior, np.full(n, p_odd), interval, GRID
        )
        np.testing.assert_allclose(part, want, rtol=1e-13)
    without = grid_kernels.grid_posterior(
        weights, top, lambda at: loglik[at], rows, which, prior, GRID
    )
    assert without.gamma_share is None and without.odd_share is None
    np.testing.assert_array_equal(without.log_gamma, got.log_gamma)


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


def test_changed_loglik_writes_in_place_the_same_numbers() -> None:
    """Nodes row by row, every row with one (a page grid's busy pages): the first rank is
    written in place; the same numbers as the general path (the nodes shuffled)."""
    rng = np.random.default_rng(8)
    n_rows = 3_000
    rows = np.sort(np.r_[np.arange(n_rows), rng.integers(0, n_rows, 2_000)])
    days = np.exp(rng.uniform(np.log(1e-3), np.log(300.0), rows.shape[0]))
    weight = rng.uniform(0.0, 10.0, rows.shape[0])
    got = grid_kernels.changed_loglik(rows, days, weight, n_rows, GRID)
    # rows in a random order, each row's nodes in theirs (the sums' order is kept)
    shuffle = np.lexsort((np.arange(rows.shape[0]), rng.permutation(n_rows)[rows]))
    want = grid_kernels.changed_loglik(rows[shuffle], days[shuffle], weight[shuffle], n_rows, GRID)
    np.testing.assert_array_equal(got, want)


def test_changed_loglik_finishes_each_block_as_a_pass_after_it() -> None:
    """``finish`` on each block of complete rows (in place, in the cache): the same numbers
    as the same operations in passes over the whole result, on both paths (nodes row by
    row, several ranks; and shuffled)."""
    rng = np.random.default_rng(10)
    n_rows = 2_500  # not a multiple of the block
    rows = np.sort(np.r_[np.arange(n_rows), rng.integers(0, n_rows, 1_800)])
    days = np.exp(rng.uniform(np.log(1e-3), np.log(300.0), rows.shape[0]))
    weight = rng.uniform(0.0, 10.0, rows.shape[0])
    exposure = rng.uniform(0.0, 50.0, n_rows)

    def passes(loglik: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        loglik -= exposure[:, None] * RATE[None, :]
        return grid_kernels.grid_weights(loglik, in_place=True)

    want_top, want = passes(grid_kernels.changed_loglik(rows, days, weight, n_rows, GRID))
    shuffle = np.lexsort((np.arange(rows.shape[0]), rng.permutation(n_rows)[rows]))
    for order in (np.arange(rows.shape[0]), shuffle):
        top = np.full(n_rows, np.nan)
        seen: list[tuple[int, int]] = []

        def finish(
            lo: int,
            hi: int,
            block: np.ndarray,
            top: np.ndarray = top,
            seen: list[tuple[int, int]] = seen,
        ) -> None:
            seen.append((lo, hi))
            block -= exposure[lo:hi, None] * RATE[None, :]
            top[lo:hi] = grid_kernels.grid_weights(block, in_place=True)[0]

        got = grid_kernels.changed_loglik(
            rows[order], days[order], weight[order], n_rows, GRID, finish=finish
        )
        assert [lo for lo, _ in seen] == list(range(0, n_rows, 1024))
        assert seen[-1][1] == n_rows
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(top, want_top)


def test_page_grid_weights_are_its_log_likelihoods_weights() -> None:
    """``_PageGrid.build`` makes its busy pages' weights block by block: the same numbers
    as ``grid_weights`` of their log-likelihoods, with and without trusted ages, for pages
    with one node and with two."""
    moments, _ = _moments(5_000)
    rng = np.random.default_rng(11)
    aged = np.where(rng.random(moments.size) < 0.3, rng.integers(1, 4, moments.size), 0)
    aged_moments = replace(
        moments,
        aged_count=aged.astype(np.float64),
        aged_days=aged * rng.uniform(0.5, 20.0, moments.size),
    )
    for m in (moments, aged_moments):
        stats = m.to_stats()
        busy = np.flatnonzero(stats.n_changed > 0)
        nodes = np.bincount(stats.node_page, minlength=stats.size)[busy]
        assert (nodes == 1).any() and (nodes == 2).any()
        top, weights = mp._PageGrid.build(stats).busy_weights
        want_top, want = grid_kernels.grid_weights(mp._busy_loglik(stats, busy), in_place=True)
        np.testing.assert_array_equal(weights, want)
        np.testing.assert_array_equal(top, want_top)


def test_quiet_marginal_per_group_is_the_per_page_one() -> None:
    """Each group's ``log b`` and ``log Gamma(a)`` taken once: the same numbers as per page,
    with and without trusted ages (``a + 0`` is ``a``)."""
    rng = np.random.default_rng(9)
    n, n_groups = 4_000, 50
    stats = IntervalStats(
        page_ids=np.arange(n),
        n_intervals=np.full(n, 3),
        n_changed=np.zeros(n, dtype=np.int64),
        unchanged_days=np.exp(rng.uniform(-3, 6, n)),
        changed_days=np.zeros(n),
        node_page=np.zeros(0, dtype=np.int64),
        node_days=np.zeros(0),
        node_weight=np.zeros(0),
        aged_count=np.where(rng.random(n) < 0.3, rng.integers(1, 4, n), 0).astype(float),
        aged_days=np.exp(rng.uniform(-2, 4, n)),
    )
    grid = mp._PageGrid.build(stats)
    codes = rng.integers(0, n_groups, n)
    shape, rate = rng.uniform(0.05, 30, n_groups), np.exp(rng.uniform(-8, 8, n_groups))
    want = grid._quiet_log_marginal(shape[codes], rate[codes])
    got = grid._quiet_log_marginal_groups(shape, rate, codes)
    assert (grid.aged > 0).any() and (grid.aged == 0).any()
    np.testing.assert_array_equal(got, want)


def test_weighted_total_is_the_sum_within_rounding() -> None:
    """The shape loss's sum (einsum in this thread, not BLAS): within the rounding of n
    products and additions, ``n eps sum |w x|``, of the exactly rounded sum."""
    rng = np.random.default_rng(12)
    w = rng.uniform(0.0, 1.0, 50_000)
    x = -rng.lognormal(2.0, 2.0, w.shape[0])
    got = grid_kernels.weighted_total(w, x)
    want = math.fsum((w * x).tolist())
    bound = w.shape[0] * np.finfo(np.float64).eps * float(np.abs(w * x).sum())
    assert abs(got - want) <= bound
    assert grid_kernels.weighted_total(w, x) == got  # the same every call
