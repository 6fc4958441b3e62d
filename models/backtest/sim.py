"""The backtest simulator: policies run day by day against exact Poisson changes.

Day 0 is a seed crawl every policy shares (every page fetched at time 0), or, from a cold
start, an ordinary fetch day: no page has been fetched, so no copy is fresh (a page's age
counts from time 0) and no learner knows anything. On each fetch day ``d`` (``d >= 1``
after a seed crawl, ``d >= 0`` from a cold start) every policy's batch is fetched at time
``d``; then day ``d``'s changes happen (drawn once, the same for every policy). Per page
and policy the simulator keeps when the local copy went stale (the first change after the
last fetch, or never), so each day's time-averaged freshness (the share of the day the copy
matched the page), age (how long it had been stale, averaged over the day) and whether a
fetch found a change are exact.

Every batch is checked: pages in range and distinct, cost within the daily budget, visits
per host within the host's capacity. A policy that breaks a rule stops the run with
:class:`PolicyViolationError` naming it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from models.backtest.last_modified import LastModifiedClock
from models.backtest.policies import Policy
from models.backtest.web import BacktestInputError, DayChanges, FloatArray, IntArray, PublicWeb

log = logging.getLogger(__name__)

#: Per-day metrics recorded for every policy (see :class:`DailyMetrics`).
METRICS = (
    "freshness",
    "age",
    "fetches",
    "cost",
    "detected",
    "no_change",
    "first_fetches",
    "detected_value",
    "true_changes",
    "true_change_value",
    "tracked_freshness",
    "seconds",
)


class PolicyViolationError(RuntimeError):
    """A policy's batch broke the budget, a host's capacity, or named pages wrongly."""


class ChangeSource(Protocol):
    def on_day(self, day: int) -> DayChanges: ...


@dataclass(frozen=True)
class DailyMetrics:
    """One policy's metrics, one entry per simulated day (index = day).

    ``freshness`` and ``age`` are value-weighted time averages over the day (age in days);
    ``fetches``, ``cost``, ``detected`` (revisits that found a change), ``no_change``
    (revisits that found none) and ``first_fetches`` (pages fetched for the first time,
    after a cold start) count the day's batch; ``detected_value`` weighs detections by page value;
    ``true_changes`` / ``true_change_value`` count (value-weighted) changes that happened
    during the day; ``tracked_freshness`` is the freshness of the tracked pages only (the
    ones a shift wakes up, say; NaN without any); ``seconds`` is the policy's planning time.
    """

    freshness: FloatArray
    age: FloatArray
    fetches: FloatArray
    cost: FloatArray
    detected: FloatArray
    no_change: FloatArray
    first_fetches: FloatArray
    detected_value: FloatArray
    true_changes: FloatArray
    true_change_value: FloatArray
    tracked_freshness: FloatArray
    seconds: FloatArray


@dataclass(frozen=True)
class PageTotals:
    """Per policy and page over the window: mean freshness, and fetches."""

    freshness: dict[str, FloatArray]
    fetches: dict[str, FloatArray]


class _Copy:
    """The ground truth about one policy's local copy of every page."""

    def __init__(self, n: int, *, cold: bool = False) -> None:
        # time of the first unseen change (a page never fetched is stale from time 0)
        self.stale_since = np.zeros(n) if cold else np.full(n, np.inf)
        self.never = np.full(n, cold)


def simulate(
    web: PublicWeb,
    changes: ChangeSource,
    policies: Sequence[Policy],
    days: int,
    budget: float,
    *,
    window: tuple[int, int] | None = None,
    tracked: IntArray | None = None,
    last_modified: LastModifiedClock | None = None,
    cold_start: bool = False,
) -> tuple[dict[str, DailyMetrics], PageTotals]:
    """Run ``policies`` for ``days`` days (day 0 is the seed crawl, or with ``cold_start``
    a fetch day like the others, every page never fetched).

    Returns each policy's daily metrics and, per page, its freshness averaged over the days
    of ``window`` (first, last + 1; default the second half) and its fetches in them, to
    break results down.
    ``tracked`` pages get their own freshness series (``tracked_freshness``).
    With ``last_modified``, every fetch (the seed crawl's included) comes with the
    Last-Modified header the page's host sends (``models/backtest/last_modified.py``);
    without it, none does.
    """
    if days < 2:
        raise BacktestInputError(f"a backtest needs at least 2 days, got {days}")
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise BacktestInputError(f"policy names must be distinct, got {names}")
    total_value = float(web.value.sum()) or 1.0
    tracked_value = web.value[tracked] if tracked is not None else None
    lo, hi = window or (days // 2, days)
    copies = {p.name: _Copy(web.size, cold=cold_start) for p in policies}
    page_fresh = {p.name: np.zeros(web.size) for p in policies}
    page_fetches = {p.name: np.zeros(web.size) for p in policies}
    series = {p.name: {m: np.zeros(days) for m in METRICS} for p in policies}
    if cold_start:
        for policy in policies:
            policy.start_cold()
    elif last_modified is not None:
        seed_headers = last_modified.headers(np.arange(web.size), 0.0)
        for policy in policies:
            policy.observe_seed(seed_headers)
    for day in range(days):
        today = changes.on_day(day)
        happened = today.count.astype(np.float64)
        true_changes = float(happened.sum())
        true_value = float(np.dot(web.value, happened))
        for policy in policies:
            row = series[policy.name]
            copy = copies[policy.name]
            if day >= 1 or cold_start:
                started = time.perf_counter()
                batch = np.asarray(policy.choose(day), dtype=np.int64)
                row["seconds"][day] = time.perf_counter() - started
                check_batch(policy.name, day, batch, web, budget)
                first = copy.never[batch]
                changed = (copy.stale_since[batch] < day) & ~first
                copy.stale_since[batch] = np.inf
                copy.never[batch] = False
                headers = None if last_modified is None else last_modified.headers(batch, day)
                policy.observe(day, batch, changed, headers)
                if lo <= day < hi:
                    page_fetches[policy.name][batch] += 1.0
                row["fetches"][day] = batch.shape[0]
                row["cost"][day] = float(web.cost[batch].sum())
                row["detected"][day] = float(changed.sum())
                row["no_change"][day] = float((~changed & ~first).sum())
                row["first_fetches"][day] = float(first.sum())
                row["detected_value"][day] = float(web.value[batch][changed].sum())
            fresh, age = _live_through_day(copy, today, day)
            if lo <= day < hi:
                page_fresh[policy.name] += fresh / (hi - lo)
            row["freshness"][day] = float(np.dot(web.value, fresh)) / total_value
            row["age"][day] = float(np.dot(web.value, age)) / total_value
            if tracked is not None and tracked_value is not None and tracked.shape[0]:
                row["tracked_freshness"][day] = float(
                    np.dot(tracked_value, fresh[tracked]) / tracked_value.sum()
                )
            else:
                row["tracked_freshness"][day] = np.nan
            row["true_changes"][day] = true_changes
            row["true_change_value"][day] = true_value
        if last_modified is not None:
            last_modified.advance(day, today)
        if day % 10 == 0:
            log.debug("backtest day %d of %d done", day, days)
    daily = {name: DailyMetrics(**values) for name, values in series.items()}
    return daily, PageTotals(page_fresh, page_fetches)


def _live_through_day(copy: _Copy, today: DayChanges, day: int) -> tuple[FloatArray, FloatArray]:
    """Freshness and age of every page over ``[day, day + 1)``; marks new staleness."""
    stale = np.isfinite(copy.stale_since)
    first = np.minimum(today.first, 1.0)
    fresh = np.where(stale, 0.0, first)
    # stale all day: age grows from (day - s) to (day + 1 - s); fresh until the first
    # change at offset x: age is 0 then grows to 1 - x
    age = np.where(stale, day + 0.5 - copy.stale_since, 0.5 * (1.0 - first) ** 2)
    newly = ~stale & (today.first < 1.0)
    copy.stale_since[newly] = day + today.first[newly]
    return fresh, age


def check_batch(name: str, day: int, batch: np.ndarray, web: PublicWeb, budget: float) -> None:
    """Raise :class:`PolicyViolationError` if ``batch`` breaks a rule of the backtest."""
    if batch.ndim != 1:
        raise PolicyViolationError(
            f"{name}, day {day}: the batch must be a 1-D array of page indices"
        )
    if batch.shape[0] == 0:
        return
    if batch.min() < 0 or batch.max() >= web.size:
        raise PolicyViolationError(f"{name}, day {day}: page index out of range")
    if np.unique(batch).shape[0] != batch.shape[0]:
        raise PolicyViolationError(f"{name}, day {day}: a page was fetched twice in one day")
    spent = float(web.cost[batch].sum())
    if spent > budget * (1 + 1e-9):
        raise PolicyViolationError(
            f"{name}, day {day}: spent {spent:.6g} over the budget {budget:.6g}"
        )
    load = np.bincount(web.hosts[batch], minlength=web.n_hosts)
    over = np.flatnonzero(load > web.host_capacity + 1e-9)
    if over.shape[0]:
        host = int(over[0])
        raise PolicyViolationError(
            f"{name}, day {day}: host {host} got {int(load[host])} visits, over its capacity "
            f"{web.host_capacity[host]:g}"
        )
