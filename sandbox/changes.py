"""When each sandbox page really changes: a seeded Poisson process per page.

A page's change times are a Poisson process of a known rate (changes/day), counted from the
web's origin. They must be the same whatever order pages and times are asked for, and cheap in
memory however far the clock runs, so time is cut into blocks of about 16 expected changes and
the arrivals inside block ``k`` are drawn from an RNG seeded by ``(page key, k)`` alone:
exponential gaps from the block's start until one crosses its end. By memorylessness, the
concatenation of the blocks is exactly a Poisson process. Each page caches only the running
count of changes before each block it has reached (an ``array('q')``) and the times of the one
block it last looked inside, so a page that changes 48 times a day for ten simulated years
costs a few kilobytes.

Rates follow the measured web (see ``models.estimation.synthetic``): about 45% of pages practically
never
change (around once a year or less), 35% change every few days to weeks, 20% daily or faster,
each host scaling its pages' rates.
"""

from __future__ import annotations

import hashlib
import random
from array import array
from bisect import bisect_left, bisect_right
from math import log

MIN_RATE = 1e-4  # changes/day: once in 27 years
MAX_RATE = 48.0  # changes/day: every half hour
_EXPECTED_PER_BLOCK = 16.0
_MAX_BLOCK_DAYS = 100_000.0


def page_key(seed: int, host: int, page: int) -> int:
    """A 64-bit key naming one page of one web; every per-page draw is seeded from it."""
    digest = hashlib.blake2b(f"{seed}:{host}:{page}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def host_rate_effect(seed: int, host: int) -> float:
    """How much faster (or slower) than typical a host's pages change (lognormal, median 1)."""
    return random.Random(page_key(seed, host, -1)).lognormvariate(0.0, 0.5)


def draw_rate(key: int, host_effect: float = 1.0) -> float:
    """A page's true change rate (changes/day) from its key: static, middle or fast."""
    rng = random.Random(key ^ 0x5A17)
    kind = rng.random()
    if kind < 0.45:
        base = rng.lognormvariate(-5.99, 1.0)  # median 1/400 per day: about once a year
    elif kind < 0.80:
        base = rng.lognormvariate(-2.71, 1.3)  # median 1/15 per day: weeks to days
    else:
        base = rng.lognormvariate(0.92, 0.8)  # median 2.5 per day: daily or faster
    return min(MAX_RATE, max(MIN_RATE, base * host_effect))


class ChangeProcess:
    """The change times of one page, in days since the web's origin, generated lazily."""

    __slots__ = ("_block_cache", "_prefix", "block_days", "key", "rate")

    def __init__(self, key: int, rate: float) -> None:
        if not rate > 0:
            raise ValueError(f"change rate must be > 0 changes/day, got {rate}")
        self.key = key
        self.rate = float(rate)
        self.block_days = min(_MAX_BLOCK_DAYS, _EXPECTED_PER_BLOCK / self.rate)
        self._prefix = array("q", [0])  # _prefix[k]: number of changes in blocks < k
        self._block_cache: tuple[int, list[float]] = (-1, [])

    def count(self, t_days: float) -> int:
        """Number of changes in ``(0, t_days]``: the page's version at that time."""
        if t_days <= 0:
            return 0
        k = int(t_days // self.block_days)
        return self._prefix_before(k) + bisect_right(self._times(k), t_days)

    def last_change(self, t_days: float) -> float | None:
        """Time of the latest change at or before ``t_days`` (None if there was none)."""
        if t_days <= 0:
            return None
        k = int(t_days // self.block_days)
        times = self._times(k)
        i = bisect_right(times, t_days)
        if i:
            return times[i - 1]
        before = self._prefix_before(k)
        if before == 0:
            return None
        # The last non-empty block before k: the first j with prefix[j] == prefix[k] ends it.
        j = bisect_left(self._prefix, before, 0, k + 1)
        return self._times(j - 1)[-1]

    def changes_between(self, start_days: float, end_days: float) -> list[float]:
        """Every change time in ``(start_days, end_days]`` (for tests and ground truth)."""
        out: list[float] = []
        if end_days <= max(start_days, 0.0):
            return out
        first = int(max(start_days, 0.0) // self.block_days)
        last = int(end_days // self.block_days)
        for k in range(first, last + 1):
            out.extend(t for t in self._block(k) if start_days < t <= end_days)
        return out

    def _prefix_before(self, k: int) -> int:
        prefix = self._prefix
        while len(prefix) <= k:
            j = len(prefix) - 1
            prefix.append(prefix[j] + len(self._block(j)))
        return prefix[k]

    def _times(self, k: int) -> list[float]:
        cached_k, times = self._block_cache
        if cached_k != k:
            times = self._block(k)
            self._block_cache = (k, times)
        return times

    def _block(self, k: int) -> list[float]:
        uniform = random.Random((self.key << 32) | k).random
        scale = -1.0 / self.rate  # exponential gaps: -log(1 - U) / rate
        start = k * self.block_days
        end = start + self.block_days
        times: list[float] = []
        t = start + scale * log(1.0 - uniform())
        while t < end:
            times.append(t)
            t += scale * log(1.0 - uniform())
        return times
