"""Backtest workloads: webs shaped like measured ones, with their ground truth.

* ``measured``: rates like the measured web. Cho & Garcia-Molina (VLDB 2000) found over a
  fifth of pages changing at every daily visit and over half of the pages of some domains
  (.edu, .gov) never changing in four months; Fetterly et al. (WWW 2003) found about 65% of
  pages unchanged over 11 weekly crawls. Hosts have heavy-tailed sizes and a few page types
  (templates) each; the pages of one host and type share behaviour (a group level, with a
  spread around it and a few odd pages), which is what smoothing by group can exploit.
* ``shop``: price monitoring of competitor shops: categories whose prices move weekly,
  flash-sale categories, discontinued ones; value tiers (bestsellers matter more and move
  more); shops that need JavaScript rendering cost five credits a visit instead of one.
* ``shift``: the measured web, plus a population that wakes up at ``shift_day``: whole
  static groups (a section relaunched) and scattered static pages start changing every day
  or two after months of silence, which is where re-estimation and verification pay.

:func:`measure_web_shape` reports the statistics the studies published, for a generated web.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from models.backtest.last_modified import LM_ABSENT, LastModifiedShares, host_behaviour
from models.backtest.web import (
    BacktestInputError,
    FloatArray,
    IntArray,
    Periodic,
    PublicWeb,
    RateSchedule,
    draw_day_changes,
)

WORKLOADS = ("measured", "shop", "shift")
#: Default politeness: one request every 10 s per host (visits per day).
DEFAULT_HOST_CAPACITY = 8_640.0

VALUE_TIERS = np.array([1.0, 2.0, 5.0, 10.0])
_TIER_SHARES = np.array([0.6, 0.25, 0.1, 0.05])
# group classes of the measured web: static, middle, fast
_LEVEL_MEDIAN = np.array([1 / 1000, 1 / 10, 8.0])
_LEVEL_SPREAD = np.array([1.0, 1.0, 0.6])
_CLASS_SHARES = {  # per host kind
    "commercial": np.array([0.42, 0.22, 0.36]),
    "institutional": np.array([0.78, 0.14, 0.08]),
}
_COMMERCIAL_SHARE = 0.6
_WITHIN_GROUP_SPREAD = 0.5  # lognormal sigma of a page's rate around its group's level
_ODD_SHARE = 0.1  # pages whose rate follows a random class, not their group's


@dataclass(frozen=True)
class Workload:
    """A backtest web: the public half for crawlers, the truth for the simulator and oracle."""

    name: str
    web: PublicWeb
    truth: RateSchedule
    group_class: IntArray  # per group: 0 static, 1 middle, 2 fast (description only)
    description: str
    #: per host, what its Last-Modified is (``models/backtest/last_modified.py`` codes;
    #: None: no host sends one). Truth: only the simulator reads it.
    last_modified: IntArray | None = None
    #: pages that change on a fixed period instead of as a Poisson process (truth)
    periodic: Periodic | None = None

    def page_last_modified(self) -> IntArray:
        """Each page's Last-Modified behaviour (its host's)."""
        if self.last_modified is None:
            return np.full(self.web.size, LM_ABSENT, dtype=np.int64)
        return self.last_modified[self.web.hosts]


def build_workload(
    name: str,
    n_pages: int,
    *,
    seed: int = 0,
    host_capacity: float = DEFAULT_HOST_CAPACITY,
    shift_day: int = 30,
    last_modified: LastModifiedShares | None = None,
) -> Workload:
    """One of :data:`WORKLOADS` with ``n_pages`` pages.

    ``last_modified`` gives the shares of hosts whose Last-Modified is honest or a "now"
    stamp (default :class:`LastModifiedShares`: half honest, a quarter "now"); drawn on a
    stream of their own, so the pages and rates do not depend on them.
    """
    if name == "measured":
        work = measured_web(n_pages, seed=seed, host_capacity=host_capacity)
    elif name == "shop":
        work = shop_web(n_pages, seed=seed, host_capacity=host_capacity)
    elif name == "shift":
        work = shifting_web(n_pages, seed=seed, host_capacity=host_capacity, shift_day=shift_day)
    else:
        raise BacktestInputError(f"unknown workload {name!r}; use one of {', '.join(WORKLOADS)}")
    shares = last_modified or LastModifiedShares()
    return replace(work, last_modified=host_behaviour(work.web.n_hosts, shares, seed=seed))


def measured_web(
    n_pages: int, *, seed: int = 0, host_capacity: float = DEFAULT_HOST_CAPACITY
) -> Workload:
    """A web whose rates look like the measured one (see the module docstring)."""
    rng = np.random.default_rng([seed, 1])
    hosts = _heavy_tailed_hosts(rng, n_pages, pages_per_host=200)
    n_hosts = int(hosts.max()) + 1
    commercial = rng.random(n_hosts) < _COMMERCIAL_SHARE
    groups, group_host = _page_types(rng, hosts, mean_types=3.0)
    class_p = np.where(
        commercial[group_host][:, None],
        _CLASS_SHARES["commercial"][None, :],
        _CLASS_SHARES["institutional"][None, :],
    )
    group_class = _categorical(rng, class_p)
    level = _LEVEL_MEDIAN[group_class] * np.exp(rng.normal(0.0, _LEVEL_SPREAD[group_class]))
    rate = level[groups] * np.exp(rng.normal(0.0, _WITHIN_GROUP_SPREAD, n_pages))
    odd = rng.random(n_pages) < _ODD_SHARE
    overall = _CLASS_SHARES["commercial"] * 0.6 + _CLASS_SHARES["institutional"] * 0.4
    odd_class = rng.choice(3, size=int(odd.sum()), p=overall / overall.sum())
    rate[odd] = _LEVEL_MEDIAN[odd_class] * np.exp(rng.normal(0.0, _LEVEL_SPREAD[odd_class]))
    rate = np.clip(rate, 1e-5, 48.0)
    value = VALUE_TIERS[rng.choice(4, size=n_pages, p=_TIER_SHARES)]
    rendered = rng.random(n_hosts) < 0.1  # hosts that need a headless browser: 3x the cost
    cost = np.round(rng.lognormal(0.0, 0.4, n_pages) * np.where(rendered, 3.0, 1.0)[hosts], 3)
    web = PublicWeb(hosts, groups, value, np.maximum(cost, 0.05), _capacity(n_hosts, host_capacity))
    return Workload(
        "measured",
        web,
        RateSchedule(rate),
        group_class,
        "measured-web rates (static / middle / fast groups of host x page type)",
    )


def shop_web(
    n_pages: int, *, seed: int = 0, host_capacity: float = DEFAULT_HOST_CAPACITY
) -> Workload:
    """Price monitoring of competitor shops (see the module docstring)."""
    rng = np.random.default_rng([seed, 2])
    hosts = _heavy_tailed_hosts(rng, n_pages, pages_per_host=2_000)
    n_hosts = int(hosts.max()) + 1
    groups, group_host = _page_types(rng, hosts, mean_types=20.0)
    n_groups = group_host.shape[0]
    # categories: 0 discontinued, 1 weekly repricing, 2 flash sales
    group_class = _categorical(rng, np.tile([0.15, 0.75, 0.10], (n_groups, 1)))
    median = np.array([1 / 500, 1 / 7, 3.0])[group_class]
    level = median * np.exp(rng.normal(0.0, np.array([1.0, 1.0, 0.5])[group_class]))
    tier = rng.choice(4, size=n_pages, p=_TIER_SHARES)
    value = VALUE_TIERS[tier]
    hot = np.array([1.0, 1.3, 1.7, 2.0])[tier]  # bestsellers are repriced more often
    rate = np.clip(level[groups] * hot * np.exp(rng.normal(0.0, 0.6, n_pages)), 1e-5, 48.0)
    rendered = rng.random(n_hosts) < 0.25
    cost = np.where(rendered, 5.0, 1.0)[hosts]
    web = PublicWeb(hosts, groups, value, cost, _capacity(n_hosts, host_capacity))
    return Workload(
        "shop",
        web,
        RateSchedule(rate),
        group_class,
        "price monitoring: weekly repricing, flash-sale and discontinued categories",
    )


def shifting_web(
    n_pages: int,
    *,
    seed: int = 0,
    host_capacity: float = DEFAULT_HOST_CAPACITY,
    shift_day: int = 30,
    group_share: float = 0.10,
    page_share: float = 0.02,
    new_rate: float = 0.5,
) -> Workload:
    """The measured web where static groups (``group_share`` of pages) and scattered static
    pages (``page_share``) start changing about ``new_rate`` times a day at ``shift_day``."""
    if shift_day < 1:
        raise BacktestInputError("shift_day must be at least 1")
    base = measured_web(n_pages, seed=seed, host_capacity=host_capacity)
    rng = np.random.default_rng([seed, 3])
    rate = base.truth.base
    groups = base.web.groups
    static_groups = np.flatnonzero(base.group_class == 0)
    sizes = np.bincount(groups, minlength=base.group_class.shape[0])
    order = rng.permutation(static_groups)
    taken = order[: int(np.searchsorted(np.cumsum(sizes[order]), group_share * n_pages)) + 1]
    woken = np.isin(groups, taken) & (rate < 0.01)
    quiet = np.flatnonzero(~woken & (rate < 0.01))
    scattered = rng.choice(
        quiet, size=min(quiet.shape[0], int(page_share * n_pages)), replace=False
    )
    woken[scattered] = True
    pages = np.flatnonzero(woken)
    new = new_rate * np.exp(rng.normal(0.0, 0.6, pages.shape[0]))
    truth = RateSchedule(rate, shift_day, pages, new)
    return Workload(
        "shift",
        base.web,
        truth,
        base.group_class,
        f"measured web; {pages.shape[0]} static pages wake up at day {shift_day}",
    )


@dataclass(frozen=True)
class WebShape:
    """Statistics of a web the measurement studies published (see the module docstring)."""

    changed_every_daily_visit: float  # share changing at >= 95% of 120 daily visits
    never_changed_4_months: float  # share never changing in 120 days
    institutional_never_4_months: float  # the same, among hosts mostly static
    never_changed_11_weekly: float  # share unchanged over 11 weekly crawls (70 days)
    half_changed_by_days: float  # days until half of the pages have changed


def measure_web_shape(workload: Workload, *, seed: int = 0) -> WebShape:
    """Simulate the published measurements on ``workload``'s base rates."""
    rate = workload.truth.base
    n = rate.shape[0]
    changed_days = np.zeros(n)
    first_change = np.full(n, np.inf)
    for day in range(120):
        first = draw_day_changes(rate, seed=seed + 10_000, day=day).first
        hit = first < 1
        changed_days += hit
        first_change = np.where(hit & ~np.isfinite(first_change), day + first, first_change)
    never = ~np.isfinite(first_change)
    weekly_seen = first_change < 70.0
    host_static = np.bincount(
        workload.web.hosts, weights=(rate < 0.01).astype(float), minlength=workload.web.n_hosts
    ) / np.maximum(np.bincount(workload.web.hosts, minlength=workload.web.n_hosts), 1)
    mostly_static = host_static[workload.web.hosts] > 0.6
    finite = np.sort(first_change)
    half = float(finite[n // 2]) if n else float("nan")
    return WebShape(
        changed_every_daily_visit=float(np.mean(changed_days >= 0.95 * 119)),
        never_changed_4_months=float(never.mean()),
        institutional_never_4_months=float(never[mostly_static].mean())
        if mostly_static.any()
        else float("nan"),
        never_changed_11_weekly=float(1.0 - weekly_seen.mean()),
        half_changed_by_days=half,
    )


# --------------------------------------------------------------------------- internals


def _heavy_tailed_hosts(rng: np.random.Generator, n_pages: int, pages_per_host: int) -> IntArray:
    """Dense host codes of ``n_pages`` pages over Pareto-sized hosts (every host non-empty)."""
    if n_pages <= 0:
        raise BacktestInputError(f"the web needs at least one page, got {n_pages}")
    n_hosts = max(1, n_pages // pages_per_host)
    weight = rng.pareto(1.2, n_hosts) + 1.0
    raw = rng.choice(n_hosts, size=n_pages, p=weight / weight.sum())
    _, dense = np.unique(raw, return_inverse=True)
    return dense.astype(np.int64)


def _page_types(
    rng: np.random.Generator, hosts: IntArray, mean_types: float
) -> tuple[IntArray, IntArray]:
    """A page type per page within its host; returns dense group codes and each group's host."""
    n_hosts = int(hosts.max()) + 1
    n_types = 1 + rng.poisson(mean_types - 1.0, n_hosts)
    kind = np.floor(n_types[hosts] * rng.random(hosts.shape[0]) ** 1.5).astype(np.int64)
    key = hosts * (int(n_types.max()) + 1) + kind
    uniq, groups = np.unique(key, return_inverse=True)
    return groups.astype(np.int64), (uniq // (int(n_types.max()) + 1)).astype(np.int64)


def _categorical(rng: np.random.Generator, probs: NDArray[np.float64]) -> IntArray:
    """One draw per row of a (rows, k) probability matrix."""
    cum = np.cumsum(probs, axis=1)
    u = rng.random(probs.shape[0]) * cum[:, -1]
    draws: IntArray = (u[:, None] > cum).sum(axis=1).astype(np.int64)
    return draws


def _capacity(n_hosts: int, per_host: float) -> FloatArray:
    if not per_host > 0:
        raise BacktestInputError(f"host capacity must be positive, got {per_host}")
    return np.full(n_hosts, float(np.floor(per_host)))
