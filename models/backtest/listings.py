"""Backtest of listings and JSON endpoints on a shop web: the planner with each signal on and off.

The web is the ``shop`` workload (price monitoring: weekly repricing, flash-sale and
discontinued categories; shops that need rendering cost five credits a visit) with two
options of the web family:

* ``listings``: every category (the shop's page type, its smoothing group) has listing pages
  of ``listing_size`` items, each showing every listed item's summary; a summary changes when
  the item's record does (``summary_recall`` of the changes show: 1 on the sandbox, where a
  change always moves the price). A listing costs what one of its host's pages costs.
* ``json_endpoints``: every item has a JSON endpoint behind its page, fetched instead of the
  page: one plain credit even where the page needs rendering (``json_cost``), and under a
  bandwidth model a third of the page's bytes (measured on the sandbox: 969 against 2,885).

The planner is the deployed one (``models.backtest.deployed.DeployedPlannerPolicy``:
``plan_from_moments`` every day). With listings, each day, before it plans
(``ListingPlannerPolicy``): the listings worth it are read (``models.planning.listing_reads``,
the daily pass's rule: a listing is a page with a rate, read when its items' expected changes
since their last observation, under the planner's own rate estimates, reach
``listing_threshold`` per credit it costs, and the read fits the budget with the fetches the
fetch order would make of what it shows); each listed item whose summary changed since the
item's last observation is known stale (``pending``) and fetched first (in the fetch order,
``stale_fetch_order``: kept value per credit squared, within the budget left after the
listings and the hosts' capacities), else kept known stale for a later day; each listed item
whose summary did not change is
recorded as an unchanged observation (the estimator's "no change since t", as a 304 is) and
is not fetched; the planner plans the rest of the budget over the other pages. A fetch is
the item's observation and ends its known staleness.

Credits per change detected count every credit spent, the listings' included, over the
fetches that found a change; freshness is the simulator's (value-weighted, time-averaged).
``compare_listings`` runs the planner without signals and with each; ``same_freshness``
finds the smallest budget at which the planner with listings is at least as fresh as the
planner without at the full budget, and its credits per change there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from models.backtest.deployed import DeployedPlannerPolicy
from models.backtest.learning import BoolArray
from models.backtest.sim import ChangeSource, DailyMetrics, simulate
from models.backtest.web import (
    BacktestInputError,
    ChangeStream,
    DayChanges,
    FloatArray,
    IntArray,
    PublicWeb,
)
from models.backtest.workloads import Workload, shop_web
from models.estimation.change_rate import estimate_from_moments
from models.planning.core import PlanningPages, plan_from_moments
from models.planning.listing_reads import listed_items, listings_to_read, stale_fetch_order

#: The sandbox's measured bytes of a JSON endpoint against its page (969 / 2,885).
JSON_BYTES_SHARE = 0.34


@dataclass(frozen=True)
class ShopSignals:
    """The web-family options: which cheap signals the shop web offers the crawler."""

    listings: bool = False
    json_endpoints: bool = False
    listing_size: int = 40
    #: a listing is read when its items' expected changes since they were last observed
    #: reach this many per credit the listing costs: what a read adds to each change it
    #: finds is then at most 1 / threshold credits (4: 25%)
    listing_threshold: float = 4.0
    summary_recall: float = 1.0
    #: what a visit through the endpoint costs (credits: one plain request)
    json_cost: float = 1.0

    def __post_init__(self) -> None:
        if self.listing_size < 1:
            raise BacktestInputError(f"listing_size must be >= 1, got {self.listing_size}")
        if not self.listing_threshold >= 0:
            raise BacktestInputError(
                f"listing_threshold must be >= 0, got {self.listing_threshold}"
            )
        if not 0.0 < self.summary_recall <= 1.0:
            raise BacktestInputError(f"summary_recall must be in (0, 1], got {self.summary_recall}")
        if not self.json_cost > 0:
            raise BacktestInputError(f"json_cost must be > 0, got {self.json_cost}")

    @property
    def name(self) -> str:
        on = [n for n, v in (("listings", self.listings), ("json", self.json_endpoints)) if v]
        return "+".join(on) or "planner"


@dataclass(frozen=True)
class ShopListings:
    """Which listing each item is on (-1: none), and what reading each listing costs."""

    of_page: IntArray
    cost: FloatArray
    host: IntArray

    @property
    def count(self) -> int:
        return int(self.cost.shape[0])


def listings_of(web: PublicWeb, size: int) -> ShopListings:
    """Listings of ``size`` items per category (the page's group), in page order."""
    order = np.lexsort((np.arange(web.size), web.groups))
    groups = web.groups[order]
    start = np.r_[0, np.flatnonzero(np.diff(groups)) + 1]
    rank = np.arange(web.size) - np.repeat(start, np.diff(np.r_[start, web.size]))
    # listing number: categories one after another, each cut into chunks of ``size``
    chunks = -(-np.diff(np.r_[start, web.size]) // size)
    first_chunk = np.r_[0, np.cumsum(chunks)[:-1]]
    listing = np.repeat(first_chunk, np.diff(np.r_[start, web.size])) + rank // size
    of_page = np.empty(web.size, dtype=np.int64)
    of_page[order] = listing
    first_item = np.zeros(int(chunks.sum()), dtype=np.int64)
    first_item[of_page[::-1]] = np.arange(web.size)[::-1]  # any member: all share a host
    host = web.hosts[first_item]
    cost = web.cost[first_item]
    return ShopListings(of_page, cost, host)


def shop_signal_web(
    n_pages: int, signals: ShopSignals, *, seed: int = 0, bandwidth: bool = False
) -> Workload:
    """The shop workload, its visits priced through the endpoint where it has one."""
    workload = shop_web(n_pages, seed=seed)
    web = workload.web
    cost = web.cost
    if bandwidth:  # bytes in page units: a rendered page pulls its JSON as well (~2.3x)
        cost = np.where(cost > 1.0, 2.3, 1.0)
        if signals.json_endpoints:
            cost = np.full(web.size, JSON_BYTES_SHARE)
    elif signals.json_endpoints:
        cost = np.full(web.size, signals.json_cost)
    return replace(workload, web=replace(web, cost=cost))


class SummaryTruth:
    """The change stream, and what the listings show of it: per item, the last day a change
    showed in its summary (the simulator's changes, seen through ``summary_recall``)."""

    def __init__(self, changes: ChangeSource, n_pages: int, recall: float, seed: int) -> None:
        self._changes = changes
        self._recall = recall
        self._rng = np.random.default_rng([seed, 41])
        self.last_shown = np.full(n_pages, -np.inf)
        self._pending: tuple[int, DayChanges] | None = None

    def on_day(self, day: int) -> DayChanges:
        if self._pending is not None and self._pending[0] < day:
            done, changes = self._pending
            shown = changes.count > 0
            if self._recall < 1.0:
                hide = (1.0 - self._recall) ** changes.count
                shown &= self._rng.random(shown.shape[0]) >= hide
            self.last_shown[shown] = done
        today = self._changes.on_day(day)
        self._pending = (day, today)
        return today

    def shown_since(self, pages: IntArray, since: FloatArray) -> BoolArray:
        """Whether a change of each page showed on its listing after ``since`` (a day)."""
        out: BoolArray = self.last_shown[pages] >= since
        return out


class ListingPlannerPolicy(DeployedPlannerPolicy):
    """The deployed planner, with the shop's listings read before it plans (module docs)."""

    def __init__(
        self,
        web: PublicWeb,
        budget: float,
        listings: ShopListings,
        truth: SummaryTruth,
        *,
        threshold: float = 4.0,
        seed: int = 0,
        name: str = "listings",
    ) -> None:
        super().__init__(web, budget, seed=seed, name=name)
        self.listings = listings
        self.truth = truth
        self.threshold = threshold
        self.listing_cost: dict[int, float] = {}
        self.listing_reads: dict[int, int] = {}
        self.unchanged_on_listing = 0
        self.changed_on_listing = 0
        #: items a listing showed changed that are not fetched yet (known stale)
        self.pending = np.zeros(web.size, dtype=bool)

    def choose(self, day: int) -> IntArray:
        web = self.web
        listing = self.listings.of_page
        rate = estimate_from_moments(
            self.observations.moments(), groups=self.groups, prior=self.prior
        ).rate
        last = self.observations.last_fetch
        # a listing is read when its expected changes reach the threshold and the read fits
        # the budget with the fetches the fetch order would make of what it shows
        # (``listings_to_read``): known-stale items are already known, and fetched first
        prob = -np.expm1(-rate * (day - last))
        due = listings_to_read(
            self.listings.cost,
            listed_items(listing, prob, self.pending, web.value, web.cost, rate),
            budget=self.budget,
            threshold=self.threshold,
        )
        spent = float(self.listings.cost[due].sum())
        self.listing_cost[day] = spent
        self.listing_reads[day] = int(due.sum())
        read = np.flatnonzero(due[listing] & ~self.pending)
        changed = self.truth.shown_since(read, last[read])
        quiet = read[~changed]
        self.observations.record(day, quiet, np.zeros(quiet.shape[0], dtype=bool))
        self.unchanged_on_listing += int(quiet.shape[0])
        self.changed_on_listing += int(changed.sum())
        self.pending[read[changed]] = True
        # known stale: fetched in the fetch order (``stale_fetch_order``, the one the fit
        # counted the follow-ups by); those the budget or the hosts' capacities leave out
        # stay known stale until a fetch (a later day's, or the planner's)
        known = np.flatnonzero(self.pending)
        stale = known[stale_fetch_order(web.value[known], web.cost[known], rate[known])]
        forced = _fill(stale, web, self.budget - spent)
        left = self.budget - spent - float(web.cost[forced].sum())
        capacity = web.host_capacity - np.bincount(web.hosts[forced], minlength=web.n_hosts)
        planned = self._plan(day, left, capacity) if left >= float(web.cost.min()) else forced[:0]
        # items the listings told of are not planned again (the quiet ones are observed, the
        # stale ones were ranked above)
        on_read = np.zeros(web.size, dtype=bool)
        on_read[quiet] = True
        on_read[stale] = True
        out: IntArray = np.concatenate([forced, planned[~on_read[planned]]])
        self.pending[out] = False  # fetched: its state is known again
        return out

    def _plan(self, day: int, budget: float, capacity: FloatArray) -> IntArray:
        web = self.web
        cycle = plan_from_moments(
            self.observations.moments(),
            self.groups,
            PlanningPages(
                hosts=web.hosts,
                value=web.value,
                cost=web.cost,
                days_since_visit=self.observations.days_since(day),
            ),
            budget,
            capacity,
            slices=self.slices,
            seed=self.seed + day,
            prior=self.prior,
            objective=self.objective,
        )
        out: IntArray = cycle.plan.index
        return out


def _fill(ranked: IntArray, web: PublicWeb, budget: float) -> IntArray:
    """The first of ``ranked`` pages within the budget and their hosts' capacities."""
    if ranked.shape[0] == 0 or budget <= 0:
        return ranked[:0]
    hosts = web.hosts[ranked]
    by_host = np.lexsort((np.arange(ranked.shape[0]), hosts))
    start = np.r_[0, np.flatnonzero(np.diff(hosts[by_host])) + 1]
    rank = np.empty(ranked.shape[0], dtype=np.int64)
    rank[by_host] = np.arange(ranked.shape[0]) - np.repeat(
        start, np.diff(np.r_[start, ranked.shape[0]])
    )
    order = ranked[rank < web.host_capacity[hosts]]
    within = np.cumsum(web.cost[order]) <= budget * (1 + 1e-12)
    out: IntArray = order[within]
    return out


@dataclass(frozen=True)
class ShopRun:
    """One policy over the window: freshness, credits (listings included), changes found."""

    name: str
    budget: float
    freshness: float
    credits: float
    listing_credits: float
    detected: float
    fetches: float

    @property
    def credits_per_change(self) -> float:
        return self.credits / self.detected if self.detected else float("inf")


def run_shop(
    signals: ShopSignals,
    *,
    pages: int = 10_000,
    budget_share: float = 0.1,
    days: int = 40,
    seed: int = 0,
    bandwidth: bool = False,
    budget: float | None = None,
) -> ShopRun:
    """The deployed planner on the shop web with ``signals``, over days ``days // 2`` on."""
    workload = shop_signal_web(pages, signals, seed=seed, bandwidth=bandwidth)
    web = workload.web
    if budget is None:  # the same credits with and without endpoints: the pages' visits
        plain = shop_signal_web(pages, ShopSignals(), seed=seed, bandwidth=bandwidth)
        budget = plain.web.budget_for_share(budget_share)
    truth = SummaryTruth(
        ChangeStream(workload.truth, seed, workload.periodic),
        web.size,
        signals.summary_recall,
        seed,
    )
    policy: DeployedPlannerPolicy
    if signals.listings:
        policy = ListingPlannerPolicy(
            web,
            budget,
            listings_of(web, signals.listing_size),
            truth,
            threshold=signals.listing_threshold,
            seed=seed,
            name=signals.name,
        )
    else:
        policy = DeployedPlannerPolicy(web, budget, seed=seed, name=signals.name)
    window = (days // 2, days)
    daily, _ = simulate(web, truth, [policy], days, budget, window=window)
    return _summary(policy, daily[policy.name], window, budget)


def _summary(
    policy: DeployedPlannerPolicy, daily: DailyMetrics, window: tuple[int, int], budget: float
) -> ShopRun:
    lo, hi = window
    listing = 0.0
    if isinstance(policy, ListingPlannerPolicy):
        listing = sum(c for d, c in policy.listing_cost.items() if lo <= d < hi)
    return ShopRun(
        name=policy.name,
        budget=budget,
        freshness=float(daily.freshness[lo:hi].mean()),
        credits=float(daily.cost[lo:hi].sum()) + listing,
        listing_credits=listing,
        detected=float(daily.detected[lo:hi].sum()),
        fetches=float(daily.fetches[lo:hi].sum()),
    )


def compare_listings(
    *,
    variants: Sequence[ShopSignals] | None = None,
    **options: object,
) -> dict[str, ShopRun]:
    """The planner without signals and with each of ``variants``, same web, seed and budget."""
    variants = variants or (
        ShopSignals(),
        ShopSignals(listings=True),
        ShopSignals(json_endpoints=True),
        ShopSignals(listings=True, json_endpoints=True),
    )
    return {v.name: run_shop(v, **options) for v in variants}  # type: ignore[arg-type]


def same_freshness(
    signals: ShopSignals,
    target: ShopRun,
    *,
    scales: Sequence[float] = (1.0, 0.8, 0.65, 0.5, 0.4, 0.3, 0.25, 0.2),
    **options: object,
) -> ShopRun | None:
    """The smallest budget (``scales`` of the target's) at which ``signals`` is at least as
    fresh as ``target``; None if even the full budget is not."""
    best = None
    for scale in sorted(scales, reverse=True):
        run = run_shop(signals, budget=target.budget * scale, **options)  # type: ignore[arg-type]
        if run.freshness < target.freshness:
            break
        best = run
    return best


def credits_at_freshness(curve: Sequence[ShopRun], freshness: float) -> float | None:
    """The credits per change a policy's budget curve spends at ``freshness``.

    ``curve``: one policy's runs at rising budgets (freshness rises with the budget).
    Linear in freshness between the two runs that bracket it; None outside the curve (no
    run as fresh, or every run fresher: there is nothing to compare with).
    """
    runs = sorted(curve, key=lambda r: r.freshness)
    fresh = np.array([r.freshness for r in runs])
    if fresh.size == 0 or not fresh[0] <= freshness <= fresh[-1]:
        return None
    cost = np.array([r.credits_per_change for r in runs])
    return float(np.interp(freshness, fresh, cost))
