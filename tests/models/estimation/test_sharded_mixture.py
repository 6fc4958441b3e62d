"""The mixture prior fitted over host shards equals the single-process fit.

Error bound: the sharded driver takes ``fit_mixture_prior``'s steps with the same sample
(each shard's draws are the global stream's at its offset) and the same group levels; only
three web-level sums (the level distribution's EM share, the shape's loss, the odd share)
are added in another order, shard by shard. A sum of m terms in float64 moves by at most
m x 2^-53 of the sum of its terms' magnitudes when reordered: here m <= 20,000 pages, so
about 2e-12 relative. Those sums set the web-level parameters, which move by about that
much (Brent's iterates and the EM depend continuously on the values summed); a page's
estimate moves with them by at most a few times as much (its log-rate depends smoothly
on its group's Gamma, elasticity <= 1 per log unit of shape and level). Hence 1e-9 relative:
hundreds of times the bound, and far below any difference a change to the fit makes
(the test of the random stream shows one: 1e-2).
"""

from __future__ import annotations

import numpy as np
import pytest

from models.estimation.change_rate import estimate_from_moments
from models.estimation.mixture_prior import MixturePrior, fit_mixture_prior
from models.estimation.rate_data import PageMoments
from models.estimation.sharded_mixture import (
    FitRecord,
    LocalMixtureShards,
    MixtureShard,
    fit_sharded_mixture,
)
from models.estimation.synthetic import allocation_web, observation_cycles

RELATIVE = 1e-9  # see the module's docstring


def web_moments(pages: int, hosts: int, cycles: int, seed: int) -> tuple[np.ndarray, PageMoments]:
    """Per-page sums of a synthetic web seen once a cycle from a random first cycle (some
    never observed), with the page's host."""
    web = allocation_web(pages, hosts, seed=seed)
    first = np.random.default_rng(seed + 1).integers(0, cycles + 1, pages)
    n, c = np.zeros(pages, np.int64), np.zeros(pages, np.int64)
    u, s1, s2, s3 = (np.zeros(pages) for _ in range(4))
    for cycle, interval, changed, _ in observation_cycles(web.rates, cycles, seed=seed):
        seen = ~np.isnan(interval) & (cycle > first)
        hit = changed & seen
        t = np.where(hit, interval, 0.0)
        n += seen
        c += hit
        u += np.where(seen & ~hit, interval, 0.0)
        s1 += t
        s2 += t * t
        s3 += t * t * t
    return web.hosts, PageMoments(np.arange(pages, dtype=np.int64), n, c, u, s1, s2, s3)


def sharded(
    hosts: np.ndarray, moments: PageMoments, k: int
) -> tuple[PageMoments, np.ndarray, list[MixtureShard]]:
    """Pages laid shard by shard (shard = host mod k), hosts coded shard by shard."""
    shard_of = hosts % k
    order = np.lexsort((np.arange(hosts.shape[0]), hosts, shard_of))
    moments, hosts, shard_of = moments.rows(order), hosts[order], shard_of[order]
    codes = np.empty(hosts.shape[0], np.int64)
    shards, offset = [], 0
    for s in range(k):
        index = np.flatnonzero(shard_of == s)
        names, local = np.unique(hosts[index], return_inverse=True)
        shards.append(MixtureShard(moments.rows(index), local.astype(np.int64)))
        codes[index] = local + offset
        offset += names.shape[0]
    return moments, codes, shards


def same_prior(single: MixturePrior, fit: FitRecord, shards: list[MixtureShard]) -> None:
    np.testing.assert_allclose(fit.web.shape, single.shape, rtol=RELATIVE)
    np.testing.assert_allclose(fit.web.odd_share, single.odd_share, rtol=RELATIVE)
    np.testing.assert_allclose(fit.web.level_prior, single.level_prior, rtol=RELATIVE, atol=1e-15)
    levels = np.concatenate([s.group_log_rate for s in shards])
    spread = np.concatenate([s.group_log_var for s in shards])
    np.testing.assert_allclose(levels, single.group_log_rate, rtol=RELATIVE, atol=1e-12)
    np.testing.assert_allclose(spread, single.group_log_var, rtol=RELATIVE, atol=1e-12)


def test_sharded_fit_and_estimates_equal_the_single_process_ones() -> None:
    hosts, moments = web_moments(20_000, 400, 8, seed=3)
    moments, codes, shards = sharded(hosts, moments, 4)
    single = fit_mixture_prior(moments, codes)
    fit = fit_sharded_mixture(LocalMixtureShards(shards))
    assert 0 < fit.sampled < fit.observed < moments.size  # sampled, and some never observed
    same_prior(single, fit, shards)
    reference = estimate_from_moments(moments, groups=codes, prior="mixture")
    assert reference.prior_used == "mixture"
    parts = [s.estimate(fit.web) for s in shards]
    for name in ("rate", "rate_low", "rate_high", "log_std", "prior_rate"):
        got = np.concatenate([getattr(p, name) for p in parts])
        np.testing.assert_allclose(got, getattr(reference, name), rtol=RELATIVE, err_msg=name)
    np.testing.assert_array_equal(np.concatenate([p.page_ids for p in parts]), moments.page_ids)


def test_one_shard_is_the_single_process_fit() -> None:
    hosts, moments = web_moments(3_000, 60, 6, seed=5)
    moments, codes, shards = sharded(hosts, moments, 1)
    same_prior(
        fit_mixture_prior(moments, codes), fit_sharded_mixture(LocalMixtureShards(shards)), shards
    )


def test_the_sample_needs_the_global_random_stream() -> None:
    """Every shard drawing from the stream's start (offset 0) samples other pages: the
    prior moves far beyond the bound, so the equality above depends on the offsets."""
    hosts, moments = web_moments(20_000, 400, 8, seed=3)
    moments, codes, shards = sharded(hosts, moments, 4)
    single = fit_mixture_prior(moments, codes)
    view = LocalMixtureShards(shards)
    original = view.draw_sample
    view.draw_sample = lambda take, offsets, seed: original(take, [0] * len(offsets), seed)  # type: ignore[method-assign]
    fit = fit_sharded_mixture(view)
    levels = np.concatenate([s.group_log_rate for s in shards])
    assert np.max(np.abs(levels - single.group_log_rate)) > 1e3 * RELATIVE
    assert abs(fit.web.shape / single.shape - 1) > 1e3 * RELATIVE


def test_nothing_observed_gives_every_group_the_flat_level() -> None:
    hosts = np.repeat(np.arange(6), 5)
    zeros = np.zeros(30)
    moments = PageMoments(
        np.arange(30), zeros.astype(np.int64), zeros.astype(np.int64), zeros, zeros, zeros, zeros
    )
    moments, codes, shards = sharded(hosts, moments, 2)
    single = fit_mixture_prior(moments, codes)
    fit = fit_sharded_mixture(LocalMixtureShards(shards))
    same_prior(single, fit, shards)


def test_a_shard_without_its_sample_says_so() -> None:
    hosts, moments = web_moments(500, 10, 4, seed=1)
    _, _, shards = sharded(hosts, moments, 2)
    with pytest.raises(RuntimeError, match="no sample"):
        shards[0].shape_loss(0.0)
