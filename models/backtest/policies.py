"""Recrawl policies a backtest compares, all under the same daily budget and host capacities.

A policy is asked each simulated day which pages to fetch (``choose``) and is then told
what each fetch found (``observe``: changed since the previous visit or not). It never sees
the true rates; only :class:`PlannerPolicy` built with an ``OracleLearner`` does. A backtest
starts either from a seed crawl every policy shares (every page fetched at day 0) or cold
(``start_cold``: no page fetched yet; the planner sees pages never fetched, the schedules
put every page's first visit in their first pass).

* :class:`PlannerPolicy` - this project's planner, glued as ``tasks/planning.plan_cycle``
  glues it, in memory: estimate rates from the policy's own observations -> ``allocate``
  (budget after the reserved slices, per-host capacities, at most one visit per cycle) ->
  ``select_batch`` (discovery / re-estimation / verification slices, due and never-fetched
  pages by priority, leftover spent ahead of schedule).
* :class:`UniformPolicy` - every page at the same frequency, spending the budget.
* :class:`ProportionalPolicy` - frequencies proportional to estimated rates (capped at one
  visit a day, the rest of the budget water-filled over the other pages).
* :class:`NutchPolicy` - Apache Nutch's AdaptiveFetchSchedule.
* :class:`StormCrawlerPolicy` - StormCrawler's AdaptiveScheduler.

The schedule-driven policies (all but the planner) fetch the pages that are due, oldest due
first, while the day's budget and each host's capacity allow; the rest wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from models.allocation.allocate import allocate
from models.allocation.freshness import FRESHNESS, Objective
from models.backtest.learning import BoolArray, Estimate, PageObservations, RateLearner
from models.backtest.web import BacktestInputError, FloatArray, IntArray, PublicWeb
from models.planning.select import REASONS, Candidates, Slices, select_batch


class Selector(Protocol):
    """A variant of ``select_batch``: the batch (positions) and each page's reason code."""

    def __call__(
        self,
        candidates: Candidates,
        budget: float,
        host_capacity: FloatArray,
        *,
        slices: Slices,
        seed: int,
    ) -> tuple[IntArray, IntArray]: ...


#: Due times within this many days of the present count as due (float rounding).
_EPS = 1e-9


class Policy:
    """Base of backtest policies: knows the public web and its daily budget."""

    name: str = "policy"

    def __init__(
        self, web: PublicWeb, budget: float, *, recent_half_life: float | None = None
    ) -> None:
        if not (np.isfinite(budget) and budget > 0):
            raise BacktestInputError(f"budget must be positive and finite, got {budget}")
        self.web = web
        self.budget = float(budget)
        self.observations = PageObservations(
            web.size, recent_half_life=recent_half_life, hosts=web.hosts
        )
        self.spent_by_reason: dict[str, float] = {}

    def choose(self, day: int) -> IntArray:
        raise NotImplementedError

    def observe_seed(self, last_modified: FloatArray) -> None:
        """The seed crawl's Last-Modified headers (days; NaN where none was sent)."""
        self.observations.record_seed(last_modified)

    def start_cold(self) -> None:
        """No seed crawl: every page starts never fetched (call before the first day)."""
        self.observations.start_cold()

    def observe(
        self,
        day: int,
        pages: IntArray,
        changed: BoolArray,
        last_modified: FloatArray | None = None,
    ) -> None:
        """What the day's fetches found, with the Last-Modified headers if any were sent.

        ``changed`` is not read for a page's first fetch (there was no copy to compare).
        """
        first = self.observations.never_fetched(pages)
        self.observations.record(day, pages, changed, last_modified)
        self.after_fetch(day, pages, np.asarray(changed, dtype=bool), first)

    def after_fetch(self, day: int, pages: IntArray, changed: BoolArray, first: BoolArray) -> None:
        """A policy's own bookkeeping after the day's fetches (``first``: first visits)."""


# --------------------------------------------------------------------------- the planner


@dataclass(frozen=True)
class PlannerSettings:
    """How the in-memory planner runs: objective, slices, how often it re-solves."""

    objective: Objective = FRESHNESS
    slices: Slices = field(default_factory=Slices)
    #: days between re-estimations; the allocation is re-solved after each
    solve_every: int = 1
    seed: int = 0


class PlannerPolicy(Policy):
    """estimate -> allocate -> select_batch, every simulated day, as ``plan_cycle`` does.

    Rates are re-estimated and the allocation re-solved every ``settings.solve_every``
    days, and on any day ``resolve_when(day)`` is true (the oracle: when the truth shifts).
    """

    def __init__(
        self,
        web: PublicWeb,
        budget: float,
        learner: RateLearner,
        settings: PlannerSettings | None = None,
        *,
        name: str = "planner",
        resolve_when: Callable[[int], bool] | None = None,
        selector: Selector | None = None,
    ) -> None:
        super().__init__(web, budget, recent_half_life=getattr(learner, "recent_half_life", None))
        self.name = name
        self.resolve_when = resolve_when
        self.selector = selector
        self.learner = learner
        self.settings = settings or PlannerSettings()
        self._estimate: Estimate | None = None
        self._frequency: FloatArray | None = None
        self._solved_on = -(10**9)

    def choose(self, day: int) -> IntArray:
        s = self.settings
        due = self._frequency is None or day - self._solved_on >= s.solve_every
        if due or (self.resolve_when is not None and self.resolve_when(day)):
            self._estimate = self.learner.estimate(self.observations, day)
            self._frequency = self._allocate(self._estimate.rate)
            self._solved_on = day
        assert self._estimate is not None and self._frequency is not None
        web = self.web
        candidates = Candidates(
            page_ids=np.arange(web.size, dtype=np.int64),
            hosts=web.hosts,
            value=web.value,
            cost=web.cost,
            rate=self._estimate.rate,
            frequency=self._frequency,
            log_std=self._estimate.log_std,
            days_since_visit=self.observations.days_since(day),
        )
        index, reason = self.select(candidates, day)
        for code, name in enumerate(REASONS):
            spent = float(web.cost[index[reason == code]].sum())
            self.spent_by_reason[name] = self.spent_by_reason.get(name, 0.0) + spent
        return index

    def select(self, candidates: Candidates, day: int) -> tuple[IntArray, IntArray]:
        """The day's batch (positions) and why each page is in it (``REASONS`` codes)."""
        s = self.settings
        if self.selector is not None:
            return self.selector(
                candidates, self.budget, self.web.host_capacity, slices=s.slices, seed=s.seed + day
            )
        plan = select_batch(
            candidates, self.budget, self.web.host_capacity, slices=s.slices, seed=s.seed + day
        )
        return plan.index, plan.reason

    def _allocate(self, rate: FloatArray) -> FloatArray:
        s = self.settings.slices
        due_budget = self.budget * (1 - s.discovery - s.reestimation - s.verification)
        web = self.web
        return allocate(
            rate,
            due_budget,
            weights=web.value,
            costs=web.cost,
            hosts=web.hosts,
            host_capacity=web.host_capacity,
            max_frequency=1.0,
            objective=self.settings.objective,
        ).frequencies


# --------------------------------------------------------------------------- schedules


class SchedulePolicy(Policy):
    """A policy that keeps a next-due time per page and fetches due pages, oldest first."""

    def __init__(self, web: PublicWeb, budget: float, *, seed: int = 0) -> None:
        super().__init__(web, budget)
        self.next_due = np.ones(web.size)
        # a fixed random order breaks ties between pages due at the same time
        self._tiebreak = np.random.default_rng([seed, 11]).permutation(web.size)

    def choose(self, day: int) -> IntArray:
        due = np.flatnonzero(self.next_due <= day + _EPS)
        order = np.lexsort((self._tiebreak[due], self.next_due[due]))
        return fill_in_order(
            due[order], self.web.hosts, self.web.cost, self.web.host_capacity, self.budget
        )


def fill_in_order(
    ranked: IntArray, hosts_of: IntArray, cost: FloatArray, capacity: FloatArray, budget: float
) -> IntArray:
    """The longest prefix of ``ranked`` pages within each host's ``capacity`` and ``budget``.

    A page whose host is full is skipped (its turn passes to the next page); then pages are
    taken in order while the running cost stays within ``budget``, and once more from the
    pages that did not fit, for what is left.
    """
    if ranked.shape[0] == 0:
        return ranked
    hosts = hosts_of[ranked]
    by_host = np.argsort(hosts, kind="stable")
    sorted_hosts = hosts[by_host]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_hosts)) + 1]
    counts = np.diff(np.r_[starts, ranked.shape[0]])
    rank = np.empty(ranked.shape[0], dtype=np.int64)
    rank[by_host] = np.arange(ranked.shape[0]) - np.repeat(starts, counts)
    allowed = ranked[rank < np.floor(capacity[hosts] + 1e-9)]
    spent = np.cumsum(cost[allowed])
    fits = spent <= budget * (1 + 1e-12)
    chosen = allowed[fits]
    left = budget - (float(spent[fits][-1]) if fits.any() else 0.0)
    rest = allowed[~fits]
    rest = rest[cost[rest] <= left]
    if rest.shape[0]:
        extra = rest[np.cumsum(cost[rest]) <= left * (1 + 1e-12)]
        chosen = np.concatenate([chosen, extra])
    return chosen


class UniformPolicy(SchedulePolicy):
    """Every page revisited at the same frequency, as far as politeness allows.

    The frequency spends the budget (at most one visit a day); a host whose capacity cannot
    take that many visits for all its pages gets what it can take, evenly over its pages,
    and the budget it cannot use raises everyone else's frequency equally (water-filling).
    Each page follows its own fixed schedule (first revisits spread evenly over the first
    interval), so non-integer intervals alternate between the two nearest whole days and
    keep their mean; a page fetched late resumes one interval after its fetch.
    """

    name = "uniform"

    def __init__(self, web: PublicWeb, budget: float, *, seed: int = 0) -> None:
        super().__init__(web, budget, seed=seed)
        self.interval = 1.0 / uniform_frequencies(web, self.budget)
        slot = (self._tiebreak + 0.5) / web.size  # evenly spread phases in (0, 1)
        self.next_due = np.maximum(slot * self.interval, _EPS)

    def start_cold(self) -> None:
        """The first pass starts on day 0: the same phases, a day earlier."""
        super().start_cold()
        self.next_due = self.next_due - 1.0

    def after_fetch(self, day: int, pages: IntArray, changed: BoolArray, first: BoolArray) -> None:
        interval = self.interval[pages]
        scheduled = self.next_due[pages] + interval
        self.next_due[pages] = np.maximum(scheduled, day + interval - 1.0)


def uniform_frequencies(web: PublicWeb, budget: float) -> FloatArray:
    """Per page ``min(f, host cap / host pages, 1)`` with the common ``f`` spending ``budget``."""
    pages = np.bincount(web.hosts, minlength=web.n_hosts).astype(np.float64)
    host_cost = np.bincount(web.hosts, weights=web.cost, minlength=web.n_hosts)
    with np.errstate(divide="ignore"):
        ceiling = np.minimum(np.where(pages > 0, web.host_capacity / pages, np.inf), 1.0)

    def spend(f: float) -> float:
        return float(np.dot(host_cost, np.minimum(f, ceiling)))

    if spend(1.0) <= budget:
        common = 1.0
    else:  # spend is continuous and increasing in f: bisection
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if spend(mid) <= budget else (lo, mid)
        common = lo
    per_page = np.minimum(common, ceiling)[web.hosts]
    return np.asarray(np.maximum(per_page, 1e-12), dtype=np.float64)


class ProportionalPolicy(SchedulePolicy):
    """Visits in proportion to each page's estimated rate (Cho & Garcia-Molina's strawman).

    Frequencies ``min(s * rate, 1)`` per day with ``s`` spending the budget; the rates come
    from ``learner`` on this policy's own observations, re-estimated every ``solve_every``
    days. A page is due once ``1 / f`` days have passed since its last visit (within half
    a cycle, as the planner counts due pages).
    """

    name = "proportional"

    def __init__(
        self,
        web: PublicWeb,
        budget: float,
        learner: RateLearner,
        *,
        solve_every: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(web, budget, seed=seed)
        self.learner = learner
        self.solve_every = solve_every
        self._solved_on = -(10**9)
        self._interval = np.ones(web.size)
        self._cold = False

    def start_cold(self) -> None:
        super().start_cold()
        self._cold = True

    def choose(self, day: int) -> IntArray:
        if day - self._solved_on >= self.solve_every:
            rate = self.learner.estimate(self.observations, day).rate
            f = self.frequencies(rate)
            with np.errstate(divide="ignore"):
                self._interval = np.where(f > 0, 1.0 / f, np.inf)
            self._solved_on = day
        # first revisits after the seed crawl (after a cold start: first visits) spread
        # evenly over the first interval, as the uniform policy's (otherwise every page
        # would fall due on the same day)
        o = self.observations
        slot = (self._tiebreak + 0.5) / self.web.size
        if self._cold:
            spread, first_due = np.isnan(o.last_fetch), slot * self._interval - 1.0
        else:
            spread, first_due = o.n_intervals == 0, np.maximum(slot * self._interval, _EPS)
        self.next_due = np.where(spread, first_due, o.last_fetch + self._interval - 0.5)
        return super().choose(day)

    def frequencies(self, rate: FloatArray) -> FloatArray:
        """Visits per day from the estimated rates (here: in proportion to them)."""
        return proportional_frequencies(rate, self.web.cost, self.budget)


def proportional_frequencies(rate: FloatArray, cost: FloatArray, budget: float) -> FloatArray:
    """``min(s * rate, 1)`` per page with ``sum(cost * f) = budget`` (all 1 if affordable)."""
    if float(cost.sum()) <= budget:
        return np.ones(rate.shape[0])
    order = np.argsort(-rate, kind="stable")
    lam, c = rate[order], cost[order]
    capped_cost = np.r_[0.0, np.cumsum(c)]  # cost if the first k pages are capped at f = 1
    rest = float(np.sum(c * lam)) - np.r_[0.0, np.cumsum(c * lam)]  # sum c * rate of the rest
    next_rate = np.r_[lam, 0.0]  # the fastest page left uncapped when k pages are capped
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (budget - capped_cost) / rest
        # k capped pages work when page k stays at or below one visit a day
        ok = (s > 0) & np.isfinite(s) & (s * next_rate <= 1.0)
    first = int(np.flatnonzero(ok)[0]) if ok.any() else lam.shape[0]
    scale = float(s[first]) if ok.any() else 0.0
    f = np.empty_like(rate)
    f[order] = np.minimum(scale * lam, 1.0)
    return f


@dataclass(frozen=True)
class NutchSettings:
    """Apache Nutch AdaptiveFetchSchedule defaults (nutch-default.xml), in days."""

    initial_days: float = 30.0  # db.fetch.interval.default
    inc_rate: float = 0.4
    dec_rate: float = 0.2
    min_days: float = 60.0 / 86_400  # 60 s
    max_days: float = 90.0  # adaptive max 365 d, capped by db.fetch.interval.max (90 d)
    sync_delta: bool = True
    sync_delta_rate: float = 0.3


class NutchPolicy(SchedulePolicy):
    """Apache Nutch's AdaptiveFetchSchedule (``setFetchSchedule``), vectorized.

    Changed: interval x (1 - dec_rate) and the modification time becomes the fetch time;
    unchanged: interval x (1 + inc_rate). With ``sync_delta``, ``delta`` = fetch time - last
    modification; the interval is at least ``delta`` and the next fetch is
    ``fetch - sync_delta_rate * delta + interval``. The interval is kept within its bounds.
    The modification time is the fetch time of a detected change (Nutch sets it so for a
    page found modified, whatever Last-Modified said). A page's first revisit after the seed
    crawl is spread uniformly over the initial interval, as if the pages had been injected over it.
    """

    name = "nutch"

    def __init__(
        self, web: PublicWeb, budget: float, settings: NutchSettings | None = None, *, seed: int = 0
    ) -> None:
        super().__init__(web, budget, seed=seed)
        self.settings = s = settings or NutchSettings()
        self.interval = np.full(web.size, s.initial_days)
        self.modified = np.zeros(web.size)
        spread = np.random.default_rng([seed, 12]).random(web.size)
        self.next_due = np.maximum((1.0 - spread) * s.initial_days, _EPS)

    def start_cold(self) -> None:
        """Every page injected at day 0 and due at once (the generator drains the queue)."""
        super().start_cold()
        self.next_due = np.zeros(self.web.size)

    def after_fetch(self, day: int, pages: IntArray, changed: BoolArray, first: BoolArray) -> None:
        interval, next_due, modified = nutch_update(
            self.settings, self.interval[pages], self.modified[pages], float(day), changed
        )
        # a first fetch has no signature to compare (Nutch's STATUS_UNKNOWN): the interval
        # stays, the modification time becomes the fetch time, next fetch one interval on
        interval = np.where(first, self.interval[pages], interval)
        modified = np.where(first, float(day), modified)
        next_due = np.where(first, day + interval, next_due)
        self.interval[pages], self.next_due[pages], self.modified[pages] = (
            interval,
            next_due,
            modified,
        )


def nutch_update(
    s: NutchSettings, interval: FloatArray, modified: FloatArray, fetched: float, changed: BoolArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Nutch's new (interval, next fetch time, modification time) after a fetch."""
    hit = np.asarray(changed, dtype=bool)
    interval = np.where(hit, interval * (1.0 - s.dec_rate), interval * (1.0 + s.inc_rate))
    modified = np.where(hit, fetched, modified)
    reference = np.full(interval.shape[0], fetched)
    if s.sync_delta:
        delta = fetched - modified
        interval = np.maximum(interval, delta)
        reference = fetched - delta * s.sync_delta_rate
    interval = np.clip(interval, s.min_days, s.max_days)
    return interval, reference + interval, modified


@dataclass(frozen=True)
class StormCrawlerSettings:
    """StormCrawler AdaptiveScheduler defaults, in days."""

    initial_days: float = 1.0  # fetchInterval.default, 1440 min
    min_days: float = 1.0 / 24  # 60 min
    max_days: float = 14.0  # 20160 min
    dec_rate: float = 0.5
    inc_rate: float = 0.5


class StormCrawlerPolicy(SchedulePolicy):
    """StormCrawler's AdaptiveScheduler: changed I' = 0.5 I + 0.5 min; else min(1.5 I, max)."""

    name = "stormcrawler"

    def __init__(
        self,
        web: PublicWeb,
        budget: float,
        settings: StormCrawlerSettings | None = None,
        *,
        seed: int = 0,
    ) -> None:
        super().__init__(web, budget, seed=seed)
        self.settings = s = settings or StormCrawlerSettings()
        self.interval = np.full(web.size, s.initial_days)
        self.next_due = np.full(web.size, s.initial_days)

    def start_cold(self) -> None:
        """Every page discovered at day 0 and due at once."""
        super().start_cold()
        self.next_due = np.zeros(self.web.size)

    def after_fetch(self, day: int, pages: IntArray, changed: BoolArray, first: BoolArray) -> None:
        updated = stormcrawler_update(self.settings, self.interval[pages], changed)
        interval = np.where(first, self.interval[pages], updated)  # first fetch: no change seen
        self.interval[pages] = interval
        self.next_due[pages] = day + interval


def stormcrawler_update(
    s: StormCrawlerSettings, interval: FloatArray, changed: BoolArray
) -> FloatArray:
    """StormCrawler's new fetch interval after a fetch."""
    hit = np.asarray(changed, dtype=bool)
    shrunk = (1.0 - s.dec_rate) * interval + s.dec_rate * s.min_days
    grown = np.minimum(interval * (1.0 + s.inc_rate), s.max_days)
    out: FloatArray = np.where(hit, shrunk, grown)
    return out
