"""``_fill`` (a take's pages) reads only the head of its ranking; it must choose exactly the
pages the definition, a ranking of the whole pool, chooses."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from models.planning.select import _fill, _stable_argsort, _stable_argsort_codes


def _fill_by_full_sort(
    eligible: NDArray[np.bool_],
    scores: NDArray[np.float64],
    cost: NDArray[np.float64],
    hosts: NDArray[np.int64],
    capacity_left: NDArray[np.float64],
    budget: float,
) -> NDArray[np.int64]:
    """The definition (``select._fill`` before it read only a head): rank the whole pool by
    score (ties by position), skip pages beyond their host's capacity, take the longest
    affordable prefix, then the next pages that fit what is left."""
    pool = np.flatnonzero(eligible)
    if pool.shape[0] == 0 or budget <= 0:
        return pool[:0]
    pool = pool[np.argsort(-scores[pool], kind="stable")]
    by_host = np.argsort(hosts[pool], kind="stable")
    sorted_hosts = hosts[pool][by_host]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_hosts)) + 1]
    rank_sorted = np.arange(pool.shape[0]) - np.repeat(
        starts, np.diff(np.r_[starts, pool.shape[0]])
    )
    rank = np.empty(pool.shape[0], dtype=np.int64)
    rank[by_host] = rank_sorted
    pool = pool[rank < np.floor(capacity_left[hosts[pool]] + 1e-9)]
    spent = np.cumsum(cost[pool])
    fits = spent <= budget * (1 + 1e-12)
    chosen = pool[fits]
    left = budget - (float(spent[fits][-1]) if fits.any() else 0.0)
    rest = pool[~fits]
    rest = rest[cost[rest] <= left]
    if rest.shape[0] and left > 0:
        extra = rest[np.cumsum(cost[rest]) <= left * (1 + 1e-12)]
        chosen = np.concatenate([chosen, extra])
    return chosen


def _case(seed: int, n: int, n_hosts: int, tied: bool, cheap: bool):
    rng = np.random.default_rng(seed)
    scores = rng.choice([0.0, 1.0, 2.0, np.nan], n) if tied else rng.random(n)
    if not tied and n:
        scores[rng.random(n) < 0.05] = 0.5  # a few ties among unique scores
        scores[rng.random(n) < 0.01] = np.nan
    cost = rng.lognormal(0.0, 1.0, n)
    if cheap:  # a few very cheap pages deep in the ranking use up what the budget leaves
        cost[rng.random(n) < 0.02] = 1e-6
    hosts = rng.zipf(1.5, n) % n_hosts
    capacity = rng.choice([0.0, 1.0, 3.0, 1e9, np.nan], n_hosts, p=[0.1, 0.3, 0.3, 0.25, 0.05])
    eligible = rng.random(n) < 0.8
    return eligible, scores, cost, hosts.astype(np.int64), capacity


@settings(max_examples=150, deadline=None, database=None)
@given(
    st.integers(0, 10**6),
    st.integers(0, 3000),
    st.integers(1, 60),
    st.booleans(),
    st.booleans(),
    st.floats(0.0, 2.0),
    st.integers(1, 400),
)
def test_fill_chooses_what_the_whole_ranking_chooses(
    seed, n, n_hosts, tied, cheap, budget_share, first_guess
):
    eligible, scores, cost, hosts, capacity = _case(seed, n, n_hosts, tied, cheap)
    budget = budget_share * float(cost[eligible].sum()) * 0.3
    expected = _fill_by_full_sort(eligible, scores, cost, hosts, capacity, budget)
    # a small first head forces reading heads of several lengths before the whole pool
    for guess in (first_guess, None):
        got = _fill(eligible, scores, cost, hosts, capacity, budget, first_guess=guess)
        np.testing.assert_array_equal(got, expected)


def test_a_small_take_from_a_big_pool_reads_a_head_only():
    """The shortcut is taken (the test fails if ``_fill`` always sorted everything: the head
    it reads is shorter than the pool) and agrees with the definition."""
    eligible, scores, cost, hosts, capacity = _case(3, 200_000, 500, False, False)
    capacity[:] = 1e9
    budget = 0.004 * float(cost[eligible].sum())
    read: list[int] = []
    import models.planning.select as select

    original = select._fill_ranked

    def spy(ranked, *args, **kwargs):
        read.append(int(ranked.shape[0]))
        return original(ranked, *args, **kwargs)

    select._fill_ranked = spy
    try:
        got = _fill(eligible, scores, cost, hosts, capacity, budget)
    finally:
        select._fill_ranked = original
    np.testing.assert_array_equal(
        got, _fill_by_full_sort(eligible, scores, cost, hosts, capacity, budget)
    )
    assert read and max(read) < int(eligible.sum()) // 10


@settings(max_examples=100, deadline=None, database=None)
@given(st.integers(0, 10**6), st.integers(0, 2000), st.sampled_from(["unique", "few", "many"]))
def test_stable_argsorts_are_numpys_stable_argsort(seed, n, ties):
    rng = np.random.default_rng(seed)
    if ties == "unique":
        keys = rng.random(n)
    elif ties == "few":
        keys = rng.random(n)
        keys[rng.random(n) < 0.05] = 0.25
        keys[rng.random(n) < 0.02] = np.nan
        keys[rng.random(n) < 0.02] = -0.0
        keys[rng.random(n) < 0.02] = 0.0
    else:
        keys = rng.choice([-1.0, 0.0, -0.0, np.inf, np.nan], n)
    np.testing.assert_array_equal(_stable_argsort(keys), np.argsort(keys, kind="stable"))
    codes = rng.integers(0, max(1, n // 7 + 1), n)
    np.testing.assert_array_equal(_stable_argsort_codes(codes), np.argsort(codes, kind="stable"))
