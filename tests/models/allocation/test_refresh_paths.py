"""A full refresh told which pages are the candidates' gives what it finds out itself.

``expand(..., held=...)`` takes slot 0's centre as scalars and the candidates' from their
list; the floats are the same ones (slot 0's centre is nu = 0 with nothing to follow or
reach, and x + 0.0 = x), so moments, boundary pages and loads must agree exactly. Pages
past phi's limit (given up) are zeroed by masks: the same values as one by one.
"""

import dataclasses

import numpy as np
import pytest

from models.allocation import refresh
from models.allocation.allocate import AllocationProblem
from models.allocation.freshness import FRESHNESS
from models.allocation.model import Centres
from models.allocation.refresh import BLOCK_PAGES, Pages, expand
from models.allocation.solver import page_scale
from models.allocation.table import inverse_of
from models.estimation.synthetic import allocation_web


@pytest.fixture(scope="module")
def problem() -> AllocationProblem:
    web = allocation_web(5 * BLOCK_PAGES + 77, 200, seed=3)
    capacity = np.minimum(1440.0, np.maximum(1.0, 0.5 * web.pages_per_host))
    return AllocationProblem.build(
        web.rates,
        0.2 * float(web.costs.sum()),
        weights=web.weights,
        costs=web.costs,
        hosts=web.hosts,
        host_capacity=capacity,
        max_frequency=1.0,
    )


@pytest.mark.parametrize("single", [True, False], ids=["float32", "float64"])
def test_a_full_refresh_with_the_candidates_named_is_the_same(
    problem: AllocationProblem, monkeypatch: pytest.MonkeyPatch, single: bool
) -> None:
    monkeypatch.setattr(refresh, "GROUP_PAGES", 2 * BLOCK_PAGES)
    pg = Pages.of(problem, page_scale(problem))
    n_hosts = problem.host_capacity.shape[0]
    candidates = np.arange(0, n_hosts, 7)  # every 7th host has a slot of its own
    slot_of_host = np.zeros(n_hosts, dtype=np.int32)
    slot_of_host[candidates] = np.arange(1, candidates.size + 1)
    slot = slot_of_host[problem.hosts]
    slots = candidates.size + 1
    rng = np.random.default_rng(5)
    mu = 0.5
    nu = np.concatenate([[0.0], rng.uniform(0.0, 0.3, slots - 1)])
    follow = np.concatenate([[0.0], rng.uniform(-0.5, 0.5, slots - 1)])
    reach = np.concatenate([[0.0], rng.uniform(0.0, 0.05, slots - 1)])
    width = 0.04 if single else 1e-4
    c = Centres(
        np.full(slots, mu),
        nu,
        np.full(slots, width * mu),
        reach * (1.0 if single else 1e-3),
        follow,
        np.full(slots, not single),
    )
    held = np.flatnonzero(slot)
    one = expand(pg, slot, c, slots, n_hosts, single)
    two = expand(pg, slot, c, slots, n_hosts, single, held)
    np.testing.assert_array_equal(one.moments, two.moments)
    np.testing.assert_array_equal(one.boundary, two.boundary)
    assert one.host_load is not None and two.host_load is not None
    np.testing.assert_array_equal(one.host_load, two.host_load)
    assert one.boundary.size > 0 and np.any(one.moments[:, 1:] != 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pages_past_the_limit_are_given_up_and_the_ramp_is_linear(dtype: type) -> None:
    inverse = inverse_of(FRESHNESS)
    rng = np.random.default_rng(2)
    width = inverse.limit - inverse.edge
    t = np.concatenate(
        [rng.uniform(0.1, 0.9, 50), inverse.edge + width * rng.uniform(0.0, 2.0, 200)]
    )
    rate: np.ndarray = rng.lognormal(-1.0, 1.0, t.size).astype(dtype)
    scale: np.ndarray = rng.uniform(0.5, 2.0, t.size).astype(dtype)
    raw, d1, d2 = inverse.raw_expansion(t, rate, scale, dtype=dtype)
    past = t >= inverse.limit
    on = (t > inverse.edge) & ~past
    assert past.any() and on.any()
    assert np.all(raw[past] == 0) and np.all(d1[past] == 0) and np.all(d2[past] == 0)
    top = rate[on] / inverse.edge_r
    share = (inverse.limit - t[on]) / width
    np.testing.assert_array_equal(raw[on], (top * share).astype(dtype))
    np.testing.assert_array_equal(d1[on], -top * scale[on] / width)
    assert np.all(d2[on] == 0)
    assert np.all(raw[t < 0.9] > 0)


@pytest.mark.parametrize("single", [True, False], ids=["float32", "float64"])
def test_pages_with_nothing_to_gain_add_their_minimum_and_nothing_else(
    problem: AllocationProblem, single: bool
) -> None:
    # Weight 0: pinned at the minimum (t = 0, whose f' and f'' are NaN or inf outside
    # the bounds and must come out as zeros). The pages' own sums (a subset refresh: one
    # bincount a row, in page order, within one block) are those of the other pages plus
    # f_min in f's rows: f''s, f'''s and kappa's rows add exact zeros, the same floats.
    rng = np.random.default_rng(11)
    pinned = rng.random(problem.size) < 0.05
    weights = np.where(pinned, 0.0, problem.weights)
    floor = np.where(pinned, 0.01, 0.0)
    p = dataclasses.replace(problem, weights=weights, min_frequency=floor)
    pg = Pages.of(p, page_scale(p))
    slot = (problem.hosts % 5).astype(np.int32)  # four candidate slots and slot 0
    mu, slots = 0.5, 5
    c = Centres(
        np.full(slots, mu),
        np.concatenate([[0.0], np.full(slots - 1, 0.1)]),
        np.full(slots, (0.04 if single else 1e-4) * mu),
        np.concatenate([[0.0], np.full(slots - 1, 1e-4)]),
        np.zeros(slots),
        np.full(slots, not single),
    )
    every = np.arange(BLOCK_PAGES // 2)  # one block: the same sums in the same order
    pinned[every.size :] = False
    others = np.flatnonzero(~pinned[every])
    whole = expand(pg.subset(every), slot[every], c, slots, 0, single)
    part = expand(pg.subset(others), slot[others], c, slots, 0, single)
    assert np.all(np.isfinite(whole.moments))
    np.testing.assert_array_equal(whole.moments[2:], part.moments[2:])
    np.testing.assert_array_equal(whole.boundary, others[part.boundary])
    # f's rows: f_min (and f_min c; f_min read in the refresh's float type) per pinned
    # page on top, summed in another order
    # (relative rounding of a sum of positive terms: below n eps, n < 2e4)
    f_min = floor[pinned].astype(np.float32 if single else np.float64).astype(np.float64)
    extra = np.bincount(slot[pinned], f_min, minlength=slots)
    extra_c = np.bincount(slot[pinned], f_min * p.costs[pinned], minlength=slots)
    np.testing.assert_allclose(whole.moments[0], part.moments[0] + extra, rtol=2e4 * 2.3e-16)
    np.testing.assert_allclose(whole.moments[1], part.moments[1] + extra_c, rtol=2e4 * 2.3e-16)
