"""The mixture prior fitted over host shards: each shard its own pages, the driver the sums.

With pages grouped by host (the planner's default) and every page of a host in one shard,
``models.estimation.mixture_prior.fit_mixture_prior`` needs only four things that are not
a shard's own: how many groups have an observed page (how many pages the fit samples per
group), where a shard's observed pages start in the global order (the sample's random
stream), and, inside its EM, three web-level sums:

* the level distribution's EM step: ``sum_i L_i / (L_i . prior)`` over the informed groups
  (one grid vector per shard and step) and how many groups are informed;
* the within-group shape's loss: the weighted log marginal likelihood of the sampled pages
  (one float per shard and trial shape, for the driver's bounded Brent search);
* the odd share: the sum of the sampled pages' odd probabilities.

Everything else (a group's level and its posterior, each page's grid likelihood and odd
probability, the estimates) is the shard's. :class:`MixtureShard` holds one shard and
answers those questions; :func:`fit_sharded_mixture` is the driver, over any
:class:`MixtureShards` (in memory: :class:`LocalMixtureShards`; on Dask workers:
``tasks.cycle.sharded_estimation``). Then every shard estimates its pages with the public
``MixturePrior.estimate`` under its share of the prior.

Equality: the sharded fit takes the steps ``fit_mixture_prior`` takes, with the same
sample (the global random stream, each shard advanced to its offset); only the three sums
are added in another order (per shard, then across shards). See
``tests/models/estimation/test_sharded_mixture.py`` for the bound.

Mirrors ``fit_mixture_prior``'s steps with that module's helpers: a change to the fit must
be made here too, and the equality test says when it was not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray
from scipy import optimize

from models.estimation import grid_kernels
from models.estimation.gamma_core import MAX_RATE, rate_cap
from models.estimation.mixture_prior import (
    _FLOOR,
    _GRID,
    _RATE,
    _Z90,
    DecayedMoments,
    MixturePrior,
    _in_blocks,
    _level_data,
    _log_changed,
    _odd,
    _PageGrid,
    group_gamma_parameters,
)
from models.estimation.rate_data import EstimationInputError, PageMoments, RateEstimates
from models.estimation.rate_solver import bincount, two_point_quadrature

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class FitSettings:
    """``fit_mixture_prior``'s settings (its defaults)."""

    per_group: int = 64
    max_pages: int = 50_000
    iterations: int = 4
    seed: int = 0


@dataclass(frozen=True)
class WebPrior:
    """The web-level part of a mixture prior (what every shard shares)."""

    shape: float
    odd_share: float
    level_prior: FloatArray


@dataclass(frozen=True)
class Levels:
    """A shard's groups' levels: the likelihood of each group's pooled observations on
    the grid (scaled to a maximum of 1 per group) and which groups were observed."""

    likelihood: FloatArray
    informed: NDArray[np.bool_]


class MixtureShard:
    """One host shard's pages and what the sharded fit has built of them.

    ``groups`` are dense codes 0..``n_groups``-1 within the shard (hosts, in the shard's
    order of them); ``moments`` the shard's pages in the global order's share.
    """

    def __init__(self, moments: PageMoments, groups: IntArray, n_groups: int | None = None):
        if groups.shape != (moments.size,):
            raise EstimationInputError("groups must have one code per page")
        self.moments = moments
        self.groups = np.asarray(groups, dtype=np.int64)
        self.n_groups = int(n_groups if n_groups is not None else self.groups.max() + 1)
        self.observed = np.flatnonzero((moments.n_intervals > 0) | (moments.ages()[1] > 0))
        count = np.bincount(self.groups[self.observed], minlength=self.n_groups)
        self.count = count.astype(np.float64)
        self.sample = np.zeros(0, np.int64)
        self.codes = np.zeros(0, np.int64)
        self.pages: _PageGrid | None = None
        self.level_data: DecayedMoments | None = None
        self.regular = np.zeros(0)
        self.levels: Levels | None = None
        self.group_log_rate = np.zeros(self.n_groups)
        self.group_log_var = np.zeros(self.n_groups)

    # -- the sample
    def counts(self) -> tuple[int, int]:
        """Observed pages, and groups with an observed page."""
        return int(self.observed.shape[0]), int((self.count > 0).sum())

    def draw_sample(self, take: float, offset: int, seed: int) -> int:
        """The shard's pages of ``fit_mixture_prior``'s sample: each observed page with
        chance ``take / its group's observed pages``, from the global stream's draws at
        the shard's observed pages (``offset`` observed pages come before them)."""
        chance = np.minimum(1.0, take / np.maximum(self.count, 1.0))[self.groups[self.observed]]
        bits = np.random.PCG64(seed)  # what default_rng(seed) draws from: one 64-bit word
        bits.advance(offset)  # per double
        draws = np.random.Generator(bits).random(self.observed.shape[0])
        self.sample = self.observed[draws < chance]
        self.codes = self.groups[self.sample]
        self.pages = _PageGrid.build(self.moments.rows(self.sample).to_stats())
        self.level_data = _level_data(self.moments, self.sample, None)
        self.regular = np.ones(self.sample.shape[0])
        return int(self.sample.shape[0])

    def _grid(self) -> _PageGrid:
        if self.pages is None:
            raise RuntimeError("the shard has no sample yet (draw_sample first)")
        return self.pages

    # -- the group levels (``_group_levels``, split where it sums over groups)
    def level_likelihood(self, every_page: MixturePrior | None) -> int:
        """Each group's pooled likelihood, from the sample weighted by ``regular`` or (the
        last step of a sampled fit) from every observed page weighted under ``every_page``
        (``_levels_from_every_page``); returns how many groups are informed."""
        if every_page is None:
            if self.level_data is None:
                raise RuntimeError("the shard has no sample yet (draw_sample first)")
            part, codes, weight = self.level_data, self.codes, self.regular
        else:
            prior = self._local(every_page)
            codes = self.groups[self.observed]
            weight = np.empty(self.observed.shape[0])

            def block(lo: int, hi: int) -> None:
                grid = _PageGrid.build(self.moments.take(self.observed[lo:hi]))
                weight[lo:hi] = 1.0 - _odd(prior, grid, codes[lo:hi])

            _in_blocks(self.observed.shape[0], block)
            part = _level_data(self.moments, self.observed, None)
        self.levels = _likelihood(part, codes, weight, self.n_groups)
        return int(self.levels.informed.sum())

    def level_share(self, prior: FloatArray) -> FloatArray:
        """``sum_i L_i / (L_i . prior)`` over the shard's informed groups."""
        seen = self._levels().likelihood[self._levels().informed]
        if seen.shape[0] == 0:
            return np.zeros(_GRID.shape[0])
        # einsum, not BLAS, as _group_levels (OpenBLAS threads spin on a shared machine)
        share = np.einsum("i,ij->j", 1.0 / np.einsum("ij,j->i", seen, prior), seen)
        return np.asarray(share, dtype=np.float64)

    def level_posterior(self, prior: FloatArray) -> None:
        """Each group's level under the level distribution ``prior`` (kept)."""
        post = self._levels().likelihood * prior
        post /= post.sum(axis=1, keepdims=True)
        mean = np.einsum("ij,j->i", post, _GRID)
        var = np.maximum(np.einsum("ij,j->i", post, _GRID**2) - mean**2, 0.0)
        self.group_log_rate = np.asarray(mean, dtype=np.float64)
        self.group_log_var = np.asarray(var, dtype=np.float64)

    def _levels(self) -> Levels:
        if self.levels is None:
            raise RuntimeError("the shard has no level likelihood yet")
        return self.levels

    # -- the shape, the odd share
    def shape_loss(self, log_shape: float) -> float:
        """Minus the weighted log marginal likelihood of the sampled pages at a shape."""
        a, b = group_gamma_parameters(
            float(np.exp(log_shape)), self.group_log_rate, self.group_log_var
        )
        grid = self._grid()
        marginal = grid.log_marginal(a[self.codes], b[self.codes])
        return -grid_kernels.weighted_total(self.regular, marginal)

    def odd_sum(self, web: WebPrior) -> float:
        """The sampled pages' odd probabilities under ``web`` (kept: ``regular``), summed."""
        odd = _odd(self._local(web), self._grid(), self.codes)
        self.regular = 1.0 - odd
        return math.fsum(odd)

    def _local(self, web: WebPrior | MixturePrior) -> MixturePrior:
        return MixturePrior(
            web.shape, self.group_log_rate, self.group_log_var, web.odd_share, web.level_prior
        )

    # -- the estimates
    def prior(self, web: WebPrior) -> MixturePrior:
        """The shard's share of the fitted prior (its groups' levels)."""
        return self._local(web)

    def estimate(self, web: WebPrior) -> RateEstimates:
        """``estimate_with_mixture_prior``'s estimates of the shard's pages under ``web``."""
        prior = self._local(web)
        m = self.moments
        rate, log_std, _ = prior.estimate(m, self.groups)
        spread = np.exp(_Z90 * log_std)
        return RateEstimates(
            page_ids=m.page_ids,
            rate=rate,
            log_std=log_std,
            rate_low=rate / spread,
            rate_high=np.minimum(rate * spread, rate_cap(m.ages()[0])),
            n_intervals=m.n_intervals,
            n_changed=m.all_changed,
            observed_days=m.observed_days,
            prior_rate=np.minimum(prior.group_typical()[self.groups], MAX_RATE),
            prior_used="mixture",
        )


def _likelihood(part: DecayedMoments, codes: IntArray, weight: FloatArray, n_groups: int) -> Levels:
    """``_group_levels`` up to its EM: each group's pooled likelihood on the grid."""

    def pooled(values: FloatArray) -> FloatArray:
        return bincount(codes, weight * values, n_groups)

    n_changed = pooled(part.n_changed)
    t1, w1, t2, w2 = two_point_quadrature(
        n_changed,
        pooled(part.changed_sum),
        pooled(part.changed_sum_sq),
        pooled(part.changed_sum_cube),
    )
    loglik = (
        _log_changed(t1, w1) + _log_changed(t2, w2) - pooled(part.unchanged_days)[:, None] * _RATE
    )
    informed = pooled(part.n_intervals) > 0
    if part.aged_count is not None and part.aged_days is not None:
        aged = pooled(part.aged_count)
        loglik += aged[:, None] * _GRID - pooled(part.aged_days)[:, None] * _RATE
        informed |= aged > 0
    return Levels(np.exp(loglik - loglik.max(axis=1, keepdims=True)), informed)


class MixtureShards(Protocol):
    """The driver's view of the shards: each call asks every shard once, answers in shard
    order (:class:`LocalMixtureShards`; ``tasks.cycle.sharded_estimation.DaskMixtureShards``)."""

    def counts(self) -> list[tuple[int, int]]: ...

    def draw_sample(self, take: float, offsets: Sequence[int], seed: int) -> list[int]: ...

    def level_likelihood(self, every_page: MixturePrior | None) -> list[int]: ...

    def level_share(self, prior: FloatArray) -> list[FloatArray]: ...

    def level_posterior(self, prior: FloatArray) -> None: ...

    def shape_loss(self, log_shape: float) -> list[float]: ...

    def odd_sum(self, web: WebPrior) -> list[float]: ...


@dataclass
class FitRecord:
    """What the driver did: the fitted web prior and how many rounds it asked."""

    web: WebPrior
    rounds: int
    sampled: int
    observed: int


def fit_sharded_mixture(shards: MixtureShards, settings: FitSettings | None = None) -> FitRecord:
    """``fit_mixture_prior`` (no warm start, no decayed sums) over host shards.

    Leaves each shard's group levels in the shards; returns the web-level prior.
    """
    s = settings or FitSettings()
    rounds = 0

    def asked() -> None:
        nonlocal rounds
        rounds += 1

    flat = np.full(_GRID.shape[0], 1.0 / _GRID.shape[0])
    counts = shards.counts()
    asked()
    observed = sum(c[0] for c in counts)
    if observed == 0:  # nothing seen: every group at the flat level (no group informed)
        shards.draw_sample(0.0, [0] * len(counts), s.seed)
        shards.level_likelihood(None)
        shards.level_posterior(flat)
        return FitRecord(WebPrior(1.0, 0.1, flat), rounds + 3, 0, 0)
    groups_seen = sum(c[1] for c in counts)
    take = min(float(s.per_group), s.max_pages / max(float(groups_seen), 1.0))
    offsets = np.r_[0, np.cumsum([c[0] for c in counts])[:-1]].astype(np.int64)
    sampled_pages = sum(shards.draw_sample(take, [int(o) for o in offsets], s.seed))
    asked()
    sampled = sampled_pages < observed
    shape, odd_share, level_prior = 1.0, 0.1, flat
    web: WebPrior | None = None
    for step in range(s.iterations):
        every = None
        if sampled and web is not None and step == s.iterations - 1:
            every = MixturePrior(shape, np.zeros(0), np.zeros(0), odd_share, level_prior)
        informed = sum(shards.level_likelihood(every))
        asked()
        prior = level_prior
        for _ in range(20 if informed else 0):
            share = np.sum(np.vstack(shards.level_share(prior)), axis=0)
            asked()
            prior = (1 - _FLOOR) * prior * share / informed + _FLOOR / _GRID.shape[0]
        level_prior = prior
        shards.level_posterior(level_prior)
        asked()

        def loss(log_shape: float) -> float:
            asked()
            return math.fsum(shards.shape_loss(log_shape))

        best = optimize.minimize_scalar(
            loss, bounds=(np.log(0.05), np.log(50.0)), method="bounded", options={"xatol": 0.05}
        )
        shape = float(np.exp(best.x))
        web = WebPrior(shape, odd_share, level_prior)
        odd = math.fsum(shards.odd_sum(web))
        asked()
        odd_share = float(np.clip(odd / sampled_pages, 1e-3, 0.5))
    return FitRecord(WebPrior(shape, odd_share, level_prior), rounds, sampled_pages, observed)


class LocalMixtureShards:
    """Shards held in memory (tests, and one worker's share): the protocol's reference."""

    def __init__(self, shards: Sequence[MixtureShard]) -> None:
        self.shards = list(shards)

    def counts(self) -> list[tuple[int, int]]:
        return [s.counts() for s in self.shards]

    def draw_sample(self, take: float, offsets: Sequence[int], seed: int) -> list[int]:
        return [s.draw_sample(take, o, seed) for s, o in zip(self.shards, offsets, strict=True)]

    def level_likelihood(self, every_page: MixturePrior | None) -> list[int]:
        return [s.level_likelihood(every_page) for s in self.shards]

    def level_share(self, prior: FloatArray) -> list[FloatArray]:
        return [s.level_share(prior) for s in self.shards]

    def level_posterior(self, prior: FloatArray) -> None:
        for s in self.shards:
            s.level_posterior(prior)

    def shape_loss(self, log_shape: float) -> list[float]:
        return [s.shape_loss(log_shape) for s in self.shards]

    def odd_sum(self, web: WebPrior) -> list[float]:
        return [s.odd_sum(web) for s in self.shards]
