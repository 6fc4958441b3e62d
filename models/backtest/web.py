"""The simulated web of a policy backtest: what crawlers see, and the truth they never see.

A backtest web is split in two on purpose. :class:`PublicWeb` is everything a crawler may
know about its pages (host, smoothing group, value, cost, each host's politeness capacity);
:class:`RateSchedule` is the ground truth (each page's Poisson change rate, day by day),
read only by the simulator's :class:`ChangeStream` and by the oracle policy. Learning
policies are built from the public half alone, so a learner cannot peek by accident.

Changes are drawn exactly, one simulated day at a time: for every page the time of its
first change in the day (exponential, memoryless, so this is exact whatever happened
before) and how many changes happen in the day (one plus a Poisson count after the first).
That is all the simulator needs for exact freshness, age and "changed since the last
visit". Draws are seeded per day, so every policy of a run faces the same changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class BacktestInputError(ValueError):
    """A backtest set up with inconsistent inputs; the message says what is wrong."""


@dataclass(frozen=True)
class PublicWeb:
    """What a crawler knows about its pages (arrays aligned by page; never the rates).

    ``hosts`` and ``groups`` are dense codes (0..n-1): the host a page lives on, and the
    smoothing group its rate estimate is pooled with (host x page type here).
    ``host_capacity`` is the visits per day each host's politeness allows.
    """

    hosts: IntArray
    groups: IntArray
    value: FloatArray
    cost: FloatArray
    host_capacity: FloatArray

    def __post_init__(self) -> None:
        n = self.hosts.shape[0]
        for name in ("groups", "value", "cost"):
            if getattr(self, name).shape != (n,):
                raise BacktestInputError(f"{name} must have one entry per page ({n})")
        if n and (self.hosts.min() < 0 or self.hosts.max() >= self.host_capacity.shape[0]):
            raise BacktestInputError("host codes must index host_capacity")
        if n and not (self.cost > 0).all():
            raise BacktestInputError("every page needs a positive cost")
        if (self.value < 0).any() or (self.host_capacity < 0).any():
            raise BacktestInputError("values and host capacities must be non-negative")

    @property
    def size(self) -> int:
        return int(self.hosts.shape[0])

    @property
    def n_hosts(self) -> int:
        return int(self.host_capacity.shape[0])

    def budget_for_share(self, share: float) -> float:
        """Daily budget (cost units) that visits ``share`` of the pages a day at mean cost."""
        if not share > 0:
            raise BacktestInputError(f"budget share must be positive, got {share}")
        return float(share * self.cost.sum())


@dataclass(frozen=True)
class RateSchedule:
    """True change rates (changes/day): ``base``, and from ``shift_day`` on a shifted set.

    From the start of ``shift_day``, the pages ``shift_pages`` change at ``shift_rates``
    instead (a section of a site that wakes up after months of silence, say).
    """

    base: FloatArray
    shift_day: int | None = None
    shift_pages: IntArray | None = None
    shift_rates: FloatArray | None = None

    def __post_init__(self) -> None:
        if (self.base < 0).any() or not np.isfinite(self.base).all():
            raise BacktestInputError("true rates must be finite and non-negative")
        shifted = (self.shift_day, self.shift_pages, self.shift_rates)
        if any(x is not None for x in shifted) and any(x is None for x in shifted):
            raise BacktestInputError("a shift needs its day, pages and rates together")
        pages, rates = self.shift_pages, self.shift_rates
        if pages is not None and rates is not None and pages.shape != rates.shape:
            raise BacktestInputError("shift_pages and shift_rates must align")

    def on_day(self, day: int) -> FloatArray:
        """Every page's true rate during ``day``."""
        if self.shift_day is None or day < self.shift_day:
            return self.base
        assert self.shift_pages is not None and self.shift_rates is not None
        rates = self.base.copy()
        rates[self.shift_pages] = self.shift_rates
        return rates

    def changes_between(self, day: int) -> bool:
        """Whether the rates of ``day`` differ from those of the day before."""
        return self.shift_day is not None and day == self.shift_day


@dataclass(frozen=True)
class DayChanges:
    """One day's changes: offsets of each page's first and last change in the day (inf if
    none), and how many there were."""

    first: FloatArray
    count: IntArray
    last: FloatArray


@dataclass(frozen=True)
class Periodic:
    """Pages that change exactly every ``period`` days (>= 1), at ``phase + k * period``.

    Their entry in the truth's rates is ``1 / period`` (what a Poisson model of them says;
    what the oracle is told), but their changes are not Poisson: a crawler that learns the
    period can visit just after each change.
    """

    pages: IntArray
    period: FloatArray
    phase: FloatArray

    def __post_init__(self) -> None:
        if not (self.pages.shape == self.period.shape == self.phase.shape):
            raise BacktestInputError("periodic pages, periods and phases must align")
        if (self.period < 1.0).any():
            raise BacktestInputError("periods must be at least one day")

    def on_day(self, changes: DayChanges, day: int) -> DayChanges:
        """``changes`` with the periodic pages' changes of ``day`` in place of the drawn ones."""
        k = np.maximum(np.ceil((day - self.phase) / self.period), 0.0)
        offset = self.phase + k * self.period - day  # the first change at or after ``day``
        hit = offset < 1.0
        first, count, last = changes.first.copy(), changes.count.copy(), changes.last.copy()
        first[self.pages] = np.where(hit, offset, np.inf)
        count[self.pages] = hit.astype(np.int64)  # a period of a day or more: one change at most
        last[self.pages] = first[self.pages]
        return DayChanges(first, count, last)


class ChangeStream:
    """Draws each day's changes from the true rates, seeded per day (same for every policy);
    ``periodic`` pages change at their fixed times instead."""

    def __init__(self, truth: RateSchedule, seed: int, periodic: Periodic | None = None) -> None:
        self._truth = truth
        self._seed = seed
        self._periodic = periodic
        self._cache: tuple[int, DayChanges] | None = None

    def on_day(self, day: int) -> DayChanges:
        if self._cache is not None and self._cache[0] == day:
            return self._cache[1]
        changes = draw_day_changes(self._truth.on_day(day), seed=self._seed, day=day)
        if self._periodic is not None:
            changes = self._periodic.on_day(changes, day)
        self._cache = (day, changes)
        return changes


def draw_day_changes(rates: FloatArray, *, seed: int, day: int) -> DayChanges:
    """First-change offsets and change counts of one day for pages changing at ``rates``."""
    rng = np.random.default_rng([seed, 7, day])
    with np.errstate(divide="ignore"):
        first = rng.exponential(1.0, rates.shape[0]) / rates  # inf where the rate is 0
    changed = first < 1.0
    count = np.zeros(rates.shape[0], dtype=np.int64)
    count[changed] = 1 + rng.poisson(rates[changed] * (1.0 - first[changed]))
    first[~changed] = np.inf
    # The last change (what an honest Last-Modified reports) on a stream of its own, so the
    # first changes and counts stay those of runs without it: the latest of count - 1
    # uniform times after the first is first + (1 - first) U^(1 / (count - 1)).
    u = np.random.default_rng([seed, 8, day]).random(rates.shape[0])
    more = np.maximum(count - 1, 1).astype(np.float64)
    with np.errstate(invalid="ignore"):
        last = np.where(count > 1, first + (1.0 - first) * u ** (1.0 / more), first)
    return DayChanges(first, count, last)
