"""Seen sets: the exact set never errs; the Bloom filter holds its false-positive target."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.discovery.seen import BloomFilter, ExactSeenSet, bloom_size

pytestmark = pytest.mark.numerics_free


def _random_ids(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64)


def test_bloom_size_matches_the_seed_article() -> None:
    bits, hashes = bloom_size(1_000_000_000, 0.01)
    assert hashes == 7
    assert bits / 1e9 == pytest.approx(9.585, abs=0.001)  # "about 9.6 bits per URL"
    assert bits / 8 / 1e9 == pytest.approx(1.2, abs=0.01)  # "about 1.2 GB"
    assert bloom_size(1000, 0.001) == (math.ceil(-1000 * math.log(0.001) / math.log(2) ** 2), 10)
    for bad in ((0, 0.01), (10, 0.0), (10, 1.0)):
        with pytest.raises(ValueError):
            bloom_size(*bad)


@pytest.mark.parametrize("rate", [0.01, 0.001])
def test_bloom_false_positive_rate_on_fresh_ids(rate: float) -> None:
    n = 100_000  # the rate depends on bits per id, not on n: (1 - e^(-k n / m))^k
    bloom = BloomFilter(n, rate)
    k, m = bloom.n_hashes, bloom.n_bits
    expected = (1 - math.exp(-k * n / m)) ** k  # 1.004 rate at 1%, 1.00002 rate at 0.1%
    assert expected == pytest.approx(rate, rel=0.01)
    added = _random_ids(n, seed=1) & ~1  # even ids in, odd ids probed: never in the filter
    bloom.add(added)
    assert bloom.contains(added).all()  # no false negatives
    # Probes enough that 5 binomial sigmas at the expected rate, 5 sqrt(p / N), fit inside
    # the nearer bound (1.2 rate): 66 thousand at 1%, 630 thousand at 0.1%. The filter's
    # own fill varies by < 1% of the rate at this n (k times the fill's relative sigma).
    probes = math.ceil(25 * expected / (1.2 * rate - expected) ** 2)
    fresh = _random_ids(probes, seed=2) | 1
    measured = bloom.contains(fresh).mean()
    assert measured <= 1.2 * rate
    assert measured >= 0.5 * rate  # it is a filter of the size it claims, not an oversized one
    assert 0.45 < bloom.fill_ratio() < 0.55


def test_bloom_on_sequential_ids_is_just_as_good() -> None:
    bloom = BloomFilter(200_000, 0.01)
    bloom.add(np.arange(200_000))
    assert bloom.contains(np.arange(200_000)).all()
    assert bloom.contains(np.arange(10**9, 10**9 + 200_000)).mean() <= 0.012


def test_bloom_round_trips_through_bytes() -> None:
    bloom = BloomFilter(10_000, 0.01)
    ids = _random_ids(5_000, seed=3)
    bloom.add(ids)
    data = bloom.to_bytes()
    again = BloomFilter.from_bytes(data)
    assert again.to_bytes() == data and len(again) == 5_000
    probe = _random_ids(50_000, seed=4)
    assert np.array_equal(again.contains(probe), bloom.contains(probe))
    assert again.contains(ids).all()
    with pytest.raises(ValueError, match="bad header"):
        BloomFilter.from_bytes(b"nonsense")
    with pytest.raises(ValueError, match="truncated"):
        BloomFilter.from_bytes(data[:-1])


def test_add_unseen_marks_first_occurrences_of_new_ids() -> None:
    bloom = BloomFilter(1_000, 0.001)
    bloom.add([1, 2])
    assert bloom.add_unseen([2, 3, 3, 4, 1]).tolist() == [False, True, False, True, False]
    assert bloom.contains([3, 4]).all()


def test_exact_seen_set() -> None:
    seen = ExactSeenSet.of([5, 3, 5, -2])
    assert len(seen) == 3 and seen.ids.tolist() == [-2, 3, 5]
    assert seen.contains([3, 4, -2, 6, -3]).tolist() == [True, False, True, False, False]
    bigger = seen.union(np.array([4, 4, 9]))
    assert bigger.contains([4, 9, 3]).all() and len(seen) == 3  # the old set is unchanged
    assert seen.unseen([4, 3, 4, 7]).tolist() == [True, False, False, True]
    assert ExactSeenSet.of().contains([1]).tolist() == [False]
    with pytest.raises(TypeError, match="integers"):
        seen.contains([1.5])


def test_exact_set_has_no_false_answers_at_scale() -> None:
    ids = _random_ids(500_000, seed=5) & ~1  # even ids in the set
    seen = ExactSeenSet.of(ids)
    assert seen.contains(ids).all()
    # Probes half members (shuffled) and half odd ids, never members: the truth is known
    # without a second set implementation, and both answers are exercised at scale.
    rng = np.random.default_rng(6)
    probe = np.concatenate([ids[::2], _random_ids(250_000, seed=7) | 1])
    order = rng.permutation(probe.size)
    member = (np.arange(probe.size) < 250_000)[order]
    assert np.array_equal(seen.contains(probe[order]), member)
