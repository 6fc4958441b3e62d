"""Sharded planning equals single-process planning: the allocation and the batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from models.allocation.allocate import Allocation, AllocationProblem, solve
from models.allocation.freshness import FRESHNESS
from models.allocation.shards import (
    BudgetRoot,
    HostWarmth,
    LocalShards,
    SelectionSettings,
    ShardPoint,
    ShardSelection,
    select_sharded,
    shard_frequencies,
    shard_point,
    solve_multiplier,
)
from models.allocation.solver import TOLERANCE
from models.estimation.synthetic import allocation_web
from models.planning.select import AHEAD, Candidates, Slices, select_batch


@dataclass(frozen=True)
class Web:
    """A synthetic web in shard-major order (shard = host mod k), with capacities."""

    rates: np.ndarray
    weights: np.ndarray
    costs: np.ndarray
    hosts: np.ndarray  # global host codes
    capacity: np.ndarray  # per global host code
    shard_of: np.ndarray  # per page
    shards: int

    def problem(self, budget: float) -> AllocationProblem:
        return AllocationProblem.build(
            self.rates,
            budget,
            weights=self.weights,
            costs=self.costs,
            hosts=self.hosts,
            host_capacity=self.capacity,
            max_frequency=1.0,
        )

    def shard_problems(self, budget: float) -> list[AllocationProblem]:
        out = []
        for k in range(self.shards):
            m = self.shard_of == k
            hosts = self.hosts[m]
            out.append(
                AllocationProblem.build(
                    self.rates[m],
                    budget,
                    weights=self.weights[m],
                    costs=self.costs[m],
                    hosts=hosts,
                    host_capacity=self.capacity[np.unique(hosts)],
                    max_frequency=1.0,
                )
            )
        return out


def make_web(pages: int, hosts: int, shards: int, seed: int = 7, share: float = 0.1) -> Web:
    web = allocation_web(pages, hosts, seed=seed)
    # politeness as in benchmarks/bench_allocation.py (there share = 0.5): big hosts bind
    capacity = np.minimum(1440.0, np.maximum(1.0, share * web.pages_per_host))
    shard_of = web.hosts % shards
    order = np.argsort(shard_of, kind="stable")
    present = np.unique(web.hosts)
    code = np.searchsorted(present, web.hosts[order])
    return Web(
        web.rates[order],
        web.weights[order],
        web.costs[order],
        code,
        capacity[present],
        shard_of[order],
        shards,
    )


def sharded_solve(web: Web, budget: float) -> tuple[BudgetRoot, np.ndarray]:
    """The driver over in-memory shards, each keeping its warmth between trials."""
    problems = web.shard_problems(budget)
    warmth: list[HostWarmth | None] = [None] * len(problems)

    def oracle(mu: float, with_hosts: bool) -> list[ShardPoint]:
        points = []
        for k, p in enumerate(problems):
            point, warmth[k] = shard_point(p, mu, with_hosts=with_hosts, warm=warmth[k])
            points.append(point)
        return points

    root = solve_multiplier(oracle, budget)
    f = [shard_frequencies(p, root, warm=w) for p, w in zip(problems, warmth, strict=True)]
    return root, np.concatenate(f)


def assert_same_frequencies(web: Web, single: Allocation, sharded: np.ndarray) -> int:
    """Every page to 1e-9 relative, widened where the single-process answer is itself
    only that good; returns how many pages needed the widening.

    Error bound: both solvers stop within their tolerance of the same optimum: the
    single-process one accepts a relative gap of TOLERANCE (1e-11) on the budget and on
    each binding capacity, the sharded one 1e-13. (1) The multipliers then agree to about
    TOLERANCE relative, and a page's frequency moves with its multiplier m by its
    elasticity E = |d log f / d log m| = phi(r) / (r phi'(r)) (freshness: q(r) / (r^2
    e^-r), r = rate / f): about 1/2 for most pages, thousands for a page about to be given
    up (r above 10). (2) A host's load may miss its capacity by TOLERANCE x capacity, and
    that slack can sit on one page: its most elastic. So per page
    |df| <= (1e-9 + E x TOLERANCE) f + 2 TOLERANCE x capacity of its host.
    """
    f = single.frequencies
    top = np.maximum(f, sharded)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(top > 0, web.rates / top, np.inf)
        elasticity = FRESHNESS.phi(r) / (r * FRESHNESS.phi_slope(r))
    # a page at its cap or given up in both does not move with m
    elasticity = np.where((f == sharded) | ~np.isfinite(elasticity), 0.0, elasticity)
    gap = np.abs(sharded - f)
    slack = 2 * TOLERANCE * web.capacity[web.hosts]
    allowed = (1e-9 + elasticity * TOLERANCE) * top + slack
    worst = int(np.argmax(gap - allowed))
    assert gap[worst] <= allowed[worst], (worst, f[worst], sharded[worst], elasticity[worst])
    widened = int(np.sum(gap > 1e-9 * top))
    assert widened <= 1e-4 * f.shape[0], widened  # the exception, not the rule
    return widened


def binding_hosts(web: Web, f: np.ndarray) -> int:
    load = np.bincount(web.hosts, f, minlength=web.capacity.shape[0])
    return int(np.sum(load >= web.capacity * (1 - 1e-9)))


def test_sharded_allocation_equals_single_process() -> None:
    web = make_web(50_000, 500, shards=5)
    budget = 0.07 * float(web.costs.sum())  # binds, and so do 92 hosts' capacities
    single = solve(web.problem(budget))
    root, f = sharded_solve(web, budget)
    assert single.multiplier > 0 and root.multiplier > 0  # the budget binds
    assert binding_hosts(web, single.frequencies) >= 10  # and so do host capacities
    assert binding_hosts(web, f) == binding_hosts(web, single.frequencies)
    assert abs(root.multiplier / single.multiplier - 1) < 1e-9
    assert_same_frequencies(web, single, f)
    assert abs(float(np.sum(web.costs * f)) / budget - 1) < 1e-12


def test_sharded_allocation_respects_every_host_in_its_shard() -> None:
    """Each shard solves its own hosts: every capacity holds, no shard sees another's."""
    web = make_web(20_000, 300, shards=3)
    budget = 0.5 * float(web.costs.sum())
    _, f = sharded_solve(web, budget)
    load = np.bincount(web.hosts, f, minlength=web.capacity.shape[0])
    assert (load <= web.capacity * (1 + 1e-12)).all()
    assert binding_hosts(web, f) > 0


def test_budget_that_does_not_bind_and_a_zero_budget() -> None:
    web = make_web(5_000, 50, shards=3)
    big = 10 * float(web.costs.sum())
    root, f = sharded_solve(web, big)
    single = solve(web.problem(big))
    assert root.multiplier == 0.0 == single.multiplier
    np.testing.assert_allclose(f, single.frequencies, rtol=1e-9, atol=1e-12)
    root, f = sharded_solve(web, 0.0)
    assert root.multiplier == np.inf and (f == 0).all()


def test_shards_spend_adds_up_to_the_single_process_spend() -> None:
    """Spend at one multiplier: the shards' sum is the whole problem's (capacities per host)."""
    web = make_web(20_000, 200, shards=4)
    budget = 0.2 * float(web.costs.sum())
    whole, _ = shard_point(web.problem(budget), 0.4)
    parts = [shard_point(p, 0.4)[0] for p in web.shard_problems(budget)]
    assert abs(sum(p.spend for p in parts) / whole.spend - 1) < 1e-12
    assert sum(p.pages for p in parts) == web.rates.shape[0]


# --------------------------------------------------------------------------- selection


def candidates_web(
    pages: int, hosts: int, shards: int, seed: int, capacity_scale: float = 1.0
) -> tuple[Candidates, np.ndarray, np.ndarray]:
    """Candidates in shard-major order, host capacities, and each page's shard."""
    rng = np.random.default_rng(seed)
    host = rng.integers(0, hosts, pages)
    shard_of = host % shards
    order = np.lexsort((host, shard_of))
    host, shard_of = host[order], shard_of[order]
    present, code = np.unique(host, return_inverse=True)
    known = rng.random(pages) < 0.8
    since = np.where(known, rng.exponential(10.0, pages), np.nan)
    frequency = np.where(rng.random(pages) < 0.1, 0.0, rng.uniform(0.01, 1.0, pages))
    candidates = Candidates(
        page_ids=np.arange(pages),
        hosts=code.astype(np.int64),
        value=rng.choice([1.0, 2.0, 5.0, 10.0], pages),  # ties: discovery's value / cost
        cost=np.round(rng.lognormal(0.0, 0.4, pages), 2),
        rate=rng.lognormal(-2.0, 1.5, pages),
        frequency=frequency,
        log_std=rng.uniform(0.0, 3.0, pages),
        days_since_visit=since,
    )
    capacity = capacity_scale * rng.integers(1, 30, present.shape[0]).astype(np.float64)
    return candidates, capacity, shard_of


def shard_selections(
    c: Candidates,
    capacity: np.ndarray,
    shard_of: np.ndarray,
    shards: int,
    change_ratio: np.ndarray | None = None,
) -> list[ShardSelection]:
    out = []
    for k in range(shards):
        m = np.flatnonzero(shard_of == k)
        present, local = np.unique(c.hosts[m], return_inverse=True)
        part = Candidates(
            c.page_ids[m],
            local.astype(np.int64),
            c.value[m],
            c.cost[m],
            c.rate[m],
            c.frequency[m],
            c.log_std[m],
            c.days_since_visit[m],
        )
        ratio = None if change_ratio is None else change_ratio[m]
        offset = int(m[0]) if m.size else 0
        out.append(ShardSelection.start(part, capacity[present], offset, ratio))
    return out


@pytest.mark.parametrize(
    ("budget_share", "seed", "shards", "spend_leftover", "capacity_scale"),
    [
        (0.3, 1, 5, True, 1.0),  # host capacities bind
        (0.01, 2, 7, True, 1.0),  # a tight budget
        (0.9, 3, 3, True, 100.0),  # the budget binds, the due pages leave some for ahead
        (0.3, 4, 1, False, 1.0),  # one shard, no slice ahead
    ],
)
def test_sharded_selection_is_the_single_process_batch(
    budget_share: float, seed: int, shards: int, spend_leftover: bool, capacity_scale: float
) -> None:
    c, capacity, shard_of = candidates_web(30_000, 200, shards, seed, capacity_scale)
    budget = budget_share * float(c.cost.sum())
    slices = Slices(spend_leftover=spend_leftover)
    single = select_batch(c, budget, capacity, slices=slices, seed=seed)
    settings = SelectionSettings(budget, slices, 1.0, seed)
    sharded = select_sharded(
        LocalShards(shard_selections(c, capacity, shard_of, shards), settings), settings
    )
    np.testing.assert_array_equal(sharded.index, single.index)
    np.testing.assert_array_equal(sharded.reason, single.reason)
    np.testing.assert_array_equal(sharded.score, single.score)
    np.testing.assert_array_equal(sharded.expected_gain, single.expected_gain)
    np.testing.assert_array_equal(sharded.cost, single.cost)
    assert single.index.shape[0] > 100
    if budget_share == 0.9:  # the due pages leave budget: the slice ahead is exercised
        assert (single.reason == AHEAD).any()


@pytest.mark.parametrize(("seed", "spend_leftover"), [(6, True), (7, False)])
def test_sharded_selection_with_change_signals_is_the_single_process_batch(
    seed: int, spend_leftover: bool
) -> None:
    """Cheap signals (``change_ratio``) reorder each signalled host's revisits after the
    takes: shard by shard it must be the same batch as ``select_batch`` with the ratios."""
    c, capacity, shard_of = candidates_web(30_000, 200, 5, seed)
    rng = np.random.default_rng(seed)
    # a third of the hosts signal: most pages unchanged (0.2), some changed (8), the rest 1
    signalling = rng.random(int(c.hosts.max()) + 1) < 1 / 3
    ratio = np.where(
        signalling[c.hosts], rng.choice([0.2, 1.0, 8.0], c.size, p=[0.5, 0.3, 0.2]), 1.0
    )
    budget = 0.3 * float(c.cost.sum())
    slices = Slices(spend_leftover=spend_leftover)
    single = select_batch(c, budget, capacity, slices=slices, seed=seed, change_ratio=ratio)
    unsignalled = select_batch(c, budget, capacity, slices=slices, seed=seed)
    assert not np.array_equal(single.index, unsignalled.index)  # the signals moved pages
    settings = SelectionSettings(budget, slices, 1.0, seed)
    parts = shard_selections(c, capacity, shard_of, 5, ratio)
    sharded = select_sharded(LocalShards(parts, settings), settings)
    np.testing.assert_array_equal(sharded.index, single.index)
    np.testing.assert_array_equal(sharded.reason, single.reason)
    np.testing.assert_array_equal(sharded.score, single.score)
    np.testing.assert_array_equal(sharded.expected_gain, single.expected_gain)
    np.testing.assert_array_equal(sharded.expected_change, single.expected_change)
    np.testing.assert_array_equal(sharded.cost, single.cost)


def test_sharded_selection_needs_the_global_random_stream() -> None:
    """The verification sample depends on global positions: a shard offset off by one
    changes it (so the test above would catch shards drawing their own streams)."""
    c, capacity, shard_of = candidates_web(10_000, 100, 4, 5)
    budget = 0.2 * float(c.cost.sum())
    settings = SelectionSettings(budget, Slices(verification=0.5), 1.0, 0)
    parts = shard_selections(c, capacity, shard_of, 4)
    parts[1] = ShardSelection.start(
        parts[1].candidates, parts[1].host_capacity, parts[1].offset + 1
    )
    single = select_batch(c, budget, capacity, slices=Slices(verification=0.5), seed=0)
    sharded = select_sharded(LocalShards(parts, settings), settings)
    assert not np.array_equal(np.sort(sharded.index), np.sort(single.index))


@pytest.mark.scale
def test_sharded_plan_equals_single_process_at_a_million_pages() -> None:
    web = make_web(1_000_000, 10_000, shards=8)
    budget = 0.07 * float(web.costs.sum())
    single = solve(web.problem(budget))
    root, f = sharded_solve(web, budget)
    assert single.multiplier > 0 and root.multiplier > 0
    assert binding_hosts(web, single.frequencies) >= 100
    assert_same_frequencies(web, single, f)
    # the batch from those frequencies, single-process and sharded
    rng = np.random.default_rng(11)
    n = web.rates.shape[0]
    known = rng.random(n) < 0.9
    c = Candidates(
        page_ids=np.arange(n),
        hosts=web.hosts,
        value=web.weights,
        cost=web.costs,
        rate=web.rates,
        frequency=single.frequencies,
        log_std=rng.uniform(0.0, 3.0, n),
        days_since_visit=np.where(known, rng.exponential(5.0, n), np.nan),
    )
    capacity = np.floor(web.capacity)
    batch_budget = 0.05 * float(web.costs.sum())
    one = select_batch(c, batch_budget, capacity, seed=0)
    settings = SelectionSettings(batch_budget, Slices(), 1.0, 0)
    sharded_c = Candidates(
        c.page_ids, c.hosts, c.value, c.cost, c.rate, f, c.log_std, c.days_since_visit
    )
    many = select_sharded(
        LocalShards(shard_selections(sharded_c, capacity, web.shard_of, web.shards), settings),
        settings,
    )
    # the same pages for the same reasons; the order within a reason follows scores that
    # differ in their last bits (gain depends on 1/f), so near-ties may swap places
    a, b = np.argsort(one.index), np.argsort(many.index)
    np.testing.assert_array_equal(many.index[b], one.index[a])
    np.testing.assert_array_equal(many.reason[b], one.reason[a])


def test_second_pass_stops_where_the_global_pass_stops() -> None:
    """After the prefix, ``_fill`` takes cheap pages while their cumulated cost fits; a page
    of one shard that ends that pass must stop a cheaper page of another shard after it.

    Budget 10: p1 (score 10, cost 9.5) fits, p2 (9, 5) does not, 0.5 is left; then a
    (8, 0.3) fits, s (7, 0.4) ends the pass (0.7 > 0.5), so b (6, 0.1, the other shard)
    is not taken, although on its own shard it would fit.
    """
    score = np.array([10.0, 9.0, 8.0, 7.0, 6.0])
    cost = np.array([9.5, 5.0, 0.3, 0.4, 0.1])
    n = score.shape[0]
    # every page due (rate 1, one visit a day, two days since): the same gain, so the
    # priority value x gain / cost follows value = score x cost
    c = Candidates(
        page_ids=np.arange(n),
        hosts=np.arange(n),
        value=score * cost,
        cost=cost,
        rate=np.ones(n),
        frequency=np.ones(n),
        log_std=np.zeros(n),
        days_since_visit=np.full(n, 2.0),
    )
    capacity = np.full(n, 10.0)
    slices = Slices(discovery=0.0, reestimation=0.0, verification=0.0, spend_leftover=False)
    single = select_batch(c, 10.0, capacity, slices=slices)
    assert sorted(single.index.tolist()) == [0, 2]
    settings = SelectionSettings(10.0, slices, 1.0, 0)
    shard_of = np.array([0, 0, 0, 0, 1])
    parts = shard_selections(c, capacity, shard_of, 2)
    sharded = select_sharded(LocalShards(parts, settings), settings)
    np.testing.assert_array_equal(sharded.index, single.index)
